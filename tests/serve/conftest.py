"""Fixtures for the server tests: the tiny random Llama of tests/helpers/serve_case.py (its EOS
never picked: generations run to max_tokens), loaded with the sampling build the server uses."""

from __future__ import annotations

import pytest

import vkdecode
from tests.helpers.serve_case import tiny_serve_gguf


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return tiny_serve_gguf(tmp_path_factory)


@pytest.fixture(scope="module")
def model(device, tiny_path):
    with vkdecode.load(tiny_path, device=device, ctx=1024, sampling=True) as m:
        yield m

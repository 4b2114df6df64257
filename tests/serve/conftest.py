"""Fixtures for the server tests: a tiny random Llama whose EOS is never picked (generations run to
max_tokens), loaded with the sampling build the server uses."""

from __future__ import annotations

import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
EOS_ID = 2  # <|im_end|> in the tiny tokenizer


def _no_eos(name, a):
    """The output row of EOS zeroed: greedy never picks it, so generations run to max_tokens."""
    if name == "output.weight":
        a = a.copy()
        a[EOS_ID] = 0
    return a


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    hf = tiny_hf_model("llama", d, tied=False, max_position_embeddings=1024)
    return str(write_gguf(hf, d / "llama-untied-noeos.q8_0.gguf", "q8_0", mutate=_no_eos))


@pytest.fixture(scope="module")
def model(device, tiny_path):
    with vkdecode.load(tiny_path, device=device, ctx=1024, sampling=True) as m:
        yield m

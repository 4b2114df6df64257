"""Fixtures for the model tests: a session-wide cache dir of tiny random models."""

import pytest

# `tests.helpers` needs the repo root importable also under a bare `pytest` (not `python -m pytest`)
from tests.helpers.make_models import models_dir as _models_dir


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    return _models_dir(tmp_path_factory)

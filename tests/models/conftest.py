"""Fixtures for the model tests: a session-wide cache dir of tiny random models."""
import sys
from pathlib import Path

import pytest

# `tests.helpers` needs the repo root importable also under a bare `pytest` (not `python -m pytest`)
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.helpers.make_models import models_dir as _models_dir


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    return _models_dir(tmp_path_factory)

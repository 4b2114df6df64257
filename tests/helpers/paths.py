"""Paths the tests share, so a test file's depth in tests/ never matters."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
TESTS = ROOT / "tests"
HELPERS = TESTS / "helpers"
SHADERS = ROOT / "shaders"  # the runtime's GLSL

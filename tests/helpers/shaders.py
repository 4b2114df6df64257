"""Shaders used only by the tests (tests/shaders/): passed to Device.pipeline as paths."""

from pathlib import Path

TEST_SCALE = str(Path(__file__).resolve().parents[1] / "shaders" / "test_scale.comp")
DEQUANT_HALF_PROBE = str(Path(__file__).resolve().parents[1] / "shaders" / "dequant_half_probe.comp")

"""bench/f16_inputs.py: its rounding (an input past f16's range is inf in plain f16, exact after
the per-row power-of-two scale; bf16 ties to even), and on a tiny HF model the JSON: f32 is the
baseline itself, f16 inputs move the logits a little, less than bf16."""

from __future__ import annotations

import json
import sys

import numpy as np

from bench import f16_inputs
from tests.helpers.make_models import tiny_hf_model


def test_rounding_helpers():
    x = np.array([98304.0, -3.0, 1.0 / 3.0], np.float32)  # 3 x 2^15: past f16's 65504
    xr, s = f16_inputs._round_x(x, "f16")
    assert s == 1.0 and np.isinf(xr[0]) and xr[1] == -3.0
    xr, s = f16_inputs._round_x(x, "f16-row")
    assert s == 2.0**3 and np.isfinite(xr).all() and xr[0] * s == 98304.0  # a power of two: exact
    xr, s = f16_inputs._round_x(x, "f16-shift4")  # a fixed 2^-4 on every row
    assert s == 16.0 and xr[0] * s == 98304.0 and xr[2] == np.float16(1.0 / 48.0).astype(np.float32)
    assert f16_inputs._bf16(np.array([1.0 + 2**-9], np.float32))[0] == 1.0  # ties to even


def test_variants_json(models_dir, tmp_path, monkeypatch):
    d = tiny_hf_model("qwen3", models_dir)
    out = tmp_path / "f16.json"
    argv = ["f16_inputs", str(d), "--prompt", "Hello there", "--decode", "4", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    f16_inputs.main()
    r = json.loads(out.read_text())["variants"]
    assert r["f32"]["max_rel_err"] == 0.0 and r["f32"]["argmax_flips"] == []
    assert all(r[v]["finite"] for v in r)
    assert 0 < r["f16"]["max_rel_err"] < 1e-2 and r["f16"]["max_rel_err"] < r["bf16"]["max_rel_err"]
    assert r["f16-row"]["max_rel_err"] == r["f16"]["max_rel_err"]  # nothing near f16's limit here
    assert all(over == 0 for _, over in r["f32"]["max_abs_x"].values())

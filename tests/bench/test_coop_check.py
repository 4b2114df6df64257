"""bench/coop_check.py: both prompt paths against the reference on a tiny Gemma 3 GGUF (on lavapipe
both take the f32 kernels; on a GPU with tensor cores the coop path scales Gemma's rows), its JSON,
and the exit status that a differing greedy token would give."""

from __future__ import annotations

import json
import sys

import pytest

from bench import coop_check
from tests.helpers.make_models import tiny_hf_model, write_gguf


def test_paths_match_the_reference(models_dir, tmp_path, monkeypatch):
    model = write_gguf(
        tiny_hf_model("gemma3", models_dir), tmp_path / "gemma3.f16.gguf", "f16", arch="gemma3"
    )
    out = tmp_path / "check.json"
    argv = ["coop_check", str(model), "--prompt-tokens", "40", "--decode", "4", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        coop_check.main()
    r = json.loads(out.read_text())
    assert done.value.code == 0 and r["arch"] == "gemma3" and r["prompt_tokens"] == 40
    assert set(r["paths"]) == {"coop", "f32"} and len(r["reference"]["ids"]) == 4
    for p in r["paths"].values():
        assert p["ids_equal_reference"] and p["ids"] == r["reference"]["ids"]
        assert p["logits_max_rel_err"] < 5e-3 and p["argmax_equal"]

"""Llama 3.x and YaRN rope scaling and Gemma 3: the numpy reference against transformers on tiny random
models (HF directories and the same weights as GGUF), logits at every step and greedy tokens.

Positions run to 32, past the llama3 config's original context (32: every rope band occurs for
head_dim 16) and past the Gemma config's sliding window (6), so scaling and window both bite.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.make_models import LLAMA3_ROPE, YARN_ROPE, hf_logits, models_dir, tiny_hf_model, write_gguf
from tests.test_reference import PROMPT, PROMPT_IDS, reference_for, rel_err, run_greedy

DECODE = 16
LINEAR = {"rope_type": "linear", "factor": 4.0}


@pytest.fixture(scope="module")
def mdir(tmp_path_factory):
    return models_dir(tmp_path_factory)


def check_against_transformers(path, hf_dir):
    tokens, logits = run_greedy(reference_for(path, ctx=64), PROMPT_IDS, DECODE)
    ref = hf_logits(hf_dir, tokens)
    assert np.abs(ref).max() > 1.0  # logits are not degenerate
    assert rel_err(logits, ref) <= 1e-4, rel_err(logits, ref)
    assert list(ref.argmax(axis=1)[PROMPT - 1 : -1]) == tokens[PROMPT:]
    return logits


def _v4_config(src: Path, dst: Path) -> Path:
    """The same model with its config in transformers-4 form: rope_theta + rope_scaling."""
    if not dst.exists():
        shutil.copytree(src, dst)
        cfg = json.loads((dst / "config.json").read_text())
        params = cfg.pop("rope_parameters")
        cfg["rope_theta"] = params.pop("rope_theta")
        cfg["rope_scaling"] = params
        (dst / "config.json").write_text(json.dumps(cfg))
    return dst


YARN_NO_TRUNCATE = {**YARN_ROPE, "truncate": False, "beta_fast": 16.0}  # gpt-oss's form, other betas


@pytest.mark.parametrize("form", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize(
    "family,scaling",
    [
        ("llama", LLAMA3_ROPE),
        ("llama", LINEAR),
        ("qwen3", YARN_ROPE),
        ("qwen2", YARN_NO_TRUNCATE),
    ],
    ids=["llama3", "linear", "yarn-qwen3", "yarn-qwen2-no-truncate"],
)
def test_rope_scaling_matches_transformers(mdir, family, scaling, form):
    d = tiny_hf_model(family, mdir, rope_scaling=scaling)
    path = d if form == "rope_parameters" else _v4_config(d, mdir / (d.name + "-v4"))
    scaled = check_against_transformers(path, d)
    # the scaling changes the logits (a reader that dropped it would fail above)
    _, plain_logits = run_greedy(reference_for(tiny_hf_model(family, mdir), ctx=64), PROMPT_IDS, DECODE)
    assert rel_err(scaled, plain_logits) > 1e-3


def test_yarn_gguf_matches_transformers(mdir):
    """llama.cpp's YaRN keys (type, factor, original_context_length) read from a GGUF."""
    d = tiny_hf_model("qwen3", mdir, rope_scaling=YARN_ROPE)
    check_against_transformers(write_gguf(d, mdir / "qwen3-yarn.f32.gguf", "f32"), d)


def test_llama3_gguf_rope_freqs_matches_transformers(mdir):
    """llama.cpp's form: the divisors as tensor rope_freqs.weight, q/k rows permuted ("pairs")."""
    d = tiny_hf_model("llama", mdir, rope_scaling=LLAMA3_ROPE)
    check_against_transformers(write_gguf(d, mdir / "llama3-rope.f32.gguf", "f32"), d)


@pytest.mark.parametrize("tied", [True, False])
def test_gemma3_matches_transformers(mdir, tied):
    check_against_transformers(
        tiny_hf_model("gemma3", mdir, tied=tied), tiny_hf_model("gemma3", mdir, tied=tied)
    )


# GGUF has no key for query_pre_attn_scalar: llama.cpp takes head_dim (hidden / heads for the
# 62-layer 27B), as every released Gemma 3 config has it, so the GGUF tests' models do too
GGUF_SCALAR = {"query_pre_attn_scalar": 16}


def test_gemma3_global_linear_scaling_matches_transformers(mdir):
    """Bigger Gemma 3s scale the global layers' rope linearly (factor 8); sliding layers never."""
    d = tiny_hf_model(
        "gemma3", mdir, tied=True, rope_scaling={"rope_type": "linear", "factor": 8.0}, **GGUF_SCALAR
    )
    check_against_transformers(d, d)
    check_against_transformers(write_gguf(d, mdir / "gemma3-linear.f32.gguf", "f32"), d)


def test_gemma3_gguf_matches_transformers(mdir):
    """GGUF as llama.cpp writes it: norms stored as 1 + w, gemma3.* names, window metadata."""
    d = tiny_hf_model("gemma3", mdir, tied=True, **GGUF_SCALAR)
    check_against_transformers(write_gguf(d, mdir / "gemma3.f32.gguf", "f32"), d)


def test_gemma3_window_matters(mdir):
    """The same weights with a window longer than the sequence give other logits past the window."""
    a = tiny_hf_model("gemma3", mdir, tied=True)
    b = mdir / (a.name + "-nowindow")
    if not b.exists():
        shutil.copytree(a, b)
        cfg = json.loads((b / "config.json").read_text())
        cfg["sliding_window"] = 4096
        (b / "config.json").write_text(json.dumps(cfg))
    _, la = run_greedy(reference_for(a), PROMPT_IDS, DECODE)
    _, lb = run_greedy(reference_for(b), PROMPT_IDS, DECODE)
    assert rel_err(la[:6], lb[:6]) < 1e-6  # within the window: identical
    assert rel_err(la[6:], lb[6:]) > 1e-3

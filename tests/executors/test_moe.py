"""MoE models on the GPU: every mode against the numpy reference (logits and greedy tokens, step by
step), the fused rules that take the MoE block, and a steady state with no host work."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import tiny_hf_model
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.executors import make_executor
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

MODES = ("unfused", "replay-nofuse", "fused")
STEPS = 24
MOE_RULES = {"RMS_NORM_MATMUL_MOE_TOPK", "MOE_MATMUL_SILU_MUL", "MOE_MATMUL_SUM_ADD"}


@pytest.fixture(scope="module")
def qwen3moe(models_dir):
    return load_model(tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True), ctx=48)


@pytest.mark.parametrize("kv_dtype", ["f16", "f32"])
def test_modes_match_reference(device, models_dir, qwen3moe, kv_dtype):
    m = qwen3moe
    if kv_dtype == "f32":
        m = load_model(tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True), ctx=48, kv_dtype="f32")
    ref = Reference(m.program, m.weights)
    out = {}
    for mode in MODES:
        with make_executor(mode, device, m.program, m.weights) as ex:
            out[mode] = greedy_against_reference(ex, ref, STEPS)
            if mode == "fused":
                rules = {r.rule for r in ex.regions}
                assert MOE_RULES <= rules, rules
    assert out["replay-nofuse"][0] == out["unfused"][0] == out["fused"][0]
    for a, b in zip(out["replay-nofuse"][1], out["unfused"][1]):
        np.testing.assert_array_equal(a, b)

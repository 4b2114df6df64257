"""Fused region kernels against the numpy reference, through whole tiny models in fused replay.

Every case decodes from position 0 to the last context position: logits within LIMIT of a float64
reference at every step, the GPU's greedy token equal to the unfused executor's and to the argmax
of the logits it wrote. Cases cover llama / qwen2 (biases) / qwen3 (qk-norm), every weight dtype
(GGUF files written by make_models.write_gguf), head_dim 16 / 64 / 128, hidden 64 / 96, split-K
attention with 1 and several splits, lm_head row chunks, and both reduction paths (subgroup
arithmetic on and forced off). Ids: `fused-<arch>-<dtype>-<shape>-<path>`.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.make_models import models_dir as _models_dir
from tests.helpers.make_models import tiny_hf_model, write_gguf

# Weights are the same dequantised values on both sides, so what is left is f32 rounding (the
# fused kernels also reassociate the norm: rms^-1 * W (x * w)); observed ~1e-6.
LIMIT = 1e-4


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return _models_dir(tmp_path_factory)


def _model(models, arch: str, dtype: str, ctx: int, **over):
    from vkdecode.models.loader import load_model
    hf = tiny_hf_model(arch, models, **over)
    if dtype == "f32":
        return load_model(hf, ctx=ctx)
    tag = "-".join(f"{k}{v}" for k, v in sorted(over.items()))
    return load_model(write_gguf(hf, Path(models) / f"{arch}-{tag}.{dtype}.gguf", dtype), ctx=ctx)


def _caps(device, path: str, **tuning):
    from vkdecode.kernels import KernelCaps
    caps = KernelCaps.from_info(device.info, **tuning)
    if path == "smem":
        return replace(caps, subgroup_arithmetic=False)
    if not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    return caps


def decode_and_compare(device, m, caps, prompt=(1, 7, 42)):
    """Fused vs reference (every step) and vs unfused (tokens), from pos 0 to the last position.
    Returns the fused executor's items (closed) for dispatch counting."""
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.executors.unfused import UnfusedExecutor
    from vkdecode.reference import Reference
    ref = Reference(m.program, m.weights, dtype=np.float64)
    fused = ReplayExecutor(device, m.program, m.weights, caps=caps, fuse=True)
    unfused = UnfusedExecutor(device, m.program, m.weights, caps=caps)
    try:
        tok = prompt[0]
        for pos in range(m.ctx):
            want = ref.step(tok, pos)["logits"]
            got_tok = fused.step(tok, pos)
            got = fused.read_logits()
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            assert err <= LIMIT, f"pos {pos}: logits rel err {err:.3g} > {LIMIT:g}"
            assert got_tok == int(np.argmax(got)), f"pos {pos}: token is not the argmax of the logits"
            assert unfused.step(tok, pos) == got_tok, f"pos {pos}: fused and unfused tokens differ"
            tok = prompt[pos + 1] if pos + 1 < len(prompt) else got_tok
        return fused.items, fused.regions
    finally:
        fused.close()
        unfused.close()


SHAPES = {  # name -> tiny_hf_model overrides (hidden, heads, head_dim, ffn)
    "h64d16": {},
    "h96d64": {"hidden_size": 96, "num_attention_heads": 3, "num_key_value_heads": 1,
               "head_dim": 64, "intermediate_size": 160},
    "h64d128": {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2,
                "head_dim": 128, "intermediate_size": 128},
    "h96d32": {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2,
               "head_dim": 32, "intermediate_size": 96},
}

# (arch, dtype, shape, path, ctx, attn_max_chunk): every arch x both paths at f32, then each
# quantised dtype on another arch and shape
CASES = [
    ("llama", "f32", "h64d16", "sg", 24, 256),
    ("llama", "f32", "h64d16", "smem", 40, 16),
    ("qwen2", "f32", "h96d64", "sg", 40, 16),
    ("qwen2", "f32", "h96d64", "smem", 24, 256),
    ("qwen3", "f32", "h64d128", "sg", 40, 16),
    ("qwen3", "f32", "h64d128", "smem", 33, 8),
    ("llama", "f16", "h96d32", "sg", 24, 8),
    ("qwen3", "f16", "h96d64", "smem", 24, 256),
    ("llama", "q4_1", "h96d64", "sg", 40, 16),
    ("qwen2", "q8_0", "h64d16", "smem", 40, 16),
    ("qwen3", "q4_0", "h96d32", "sg", 33, 8),
    ("qwen2", "q5_0", "h64d128", "smem", 24, 256),
    ("llama", "q8_0", "h64d128", "sg", 24, 256),
    ("qwen3", "q4_1", "h64d16", "smem", 24, 256),
]


@pytest.mark.parametrize("arch,dtype,shape,path,ctx,chunk", [
    pytest.param(*c, id=f"fused-{c[0]}-{c[1]}-{c[2]}-{c[3]}-ctx{c[4]}") for c in CASES])
def test_fused_model(device, models, arch, dtype, shape, path, ctx, chunk):
    m = _model(models, arch, dtype, ctx, **SHAPES[shape])
    items, regions = decode_and_compare(device, m, _caps(device, path, attn_max_chunk=chunk))
    fused_rules = {r.rule for r in regions if r.rule}
    assert {"RMS_NORM_MATMUL", "MATMUL_ADD", "RMS_NORM_MATMUL_SILU_MUL",
            "RMS_NORM_MATMUL_ARGMAX"} <= fused_rules
    # every fused matvec region is one dispatch (the argmax region: + its final pass)
    for ri, r in enumerate(regions):
        n = sum(it.region == ri for it in items)
        if r.rule in ("RMS_NORM_MATMUL", "MATMUL_ADD", "RMS_NORM_MATMUL_SILU_MUL"):
            assert n == 1, (r.rule, n)
        elif r.rule == "RMS_NORM_MATMUL_ARGMAX":
            assert n == 2, (r.rule, n)

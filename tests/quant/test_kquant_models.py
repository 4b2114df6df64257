"""Q4_K_M-style GGUF models end to end: the K-quant tensors stay quantized on the device (weight
bytes on the device = tensor bytes in the file, not f32), and every mode decodes the reference's
tokens with logits within 1e-4 (the tiny models: 2 layers, hidden 256, so every in-dim is whole
256-superblocks; llama.cpp's Q4_K_M mix via vkdecode.benchmark.shapes.weight_dtypes)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import tiny_hf_model, write_gguf
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.executors import make_executor
from vkdecode.models.loader import load_model
from vkdecode.models.weights import open_gguf
from vkdecode.reference import Reference

H256 = {
    "hidden_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
}
STEPS = 10


def _gguf(models_dir, arch: str, tied: bool):
    hf = tiny_hf_model(arch, models_dir, tied=tied, **H256)
    return write_gguf(hf, models_dir / f"{arch}-{'tied' if tied else 'untied'}-h256.q4_k_m.gguf", "q4_k_m")


@pytest.mark.parametrize("arch,tied", [("llama", False), ("qwen3", True)])
def test_q4_k_m_device_bytes_equal_file_bytes(device, models_dir, arch, tied):
    path = _gguf(models_dir, arch, tied)
    file_bytes = sum(int(t.n_bytes) for t in open_gguf(str(path)).tensors)
    m = load_model(path, ctx=16)
    types = set(m.meta["source_types"].values())
    assert {"Q4_K", "Q6_K"} <= types and not m.meta["notes"], (types, m.meta["notes"])
    assert {w.dtype for w in m.weights.values() if len(w.shape) == 2} == {"q4_k", "q6_k"}
    before = device.allocated_bytes
    with make_executor("fused", device, m.program, m.weights) as ex:
        on_device = sum(ex.plan.weight_bytes.values())
        arena = ex.plan._weights  # the device memory the weights take, alignment included
        assert arena.allocated_bytes <= on_device + arena.align * len(arena.slices)
        assert device.allocated_bytes - before >= arena.allocated_bytes
    f32_bytes = sum(4 * int(np.prod(w.shape)) for w in m.weights.values())
    # q6_k's 2-byte pad per 210-byte superblock is the only difference from the file
    assert file_bytes <= on_device <= file_bytes * 1.01, (on_device, file_bytes)
    assert on_device * 5 < f32_bytes, (on_device, f32_bytes)


@pytest.mark.parametrize("kv", ["f16", "f32"])
@pytest.mark.parametrize("arch,tied", [("llama", False), ("qwen3", True)])
def test_q4_k_m_modes_match_reference(device, models_dir, arch, tied, kv):
    m = load_model(_gguf(models_dir, arch, tied), ctx=STEPS, kv_dtype=kv)
    ref = Reference(m.program, m.weights)
    out = {mode: None for mode in ("fused", "replay-nofuse", "unfused")}
    for mode in out:
        with make_executor(mode, device, m.program, m.weights) as ex:
            # f16 caches: see tests/lowering/test_regions.py LIMIT_F16_KV
            out[mode] = greedy_against_reference(ex, ref, STEPS, first=1)[0]
            if mode == "fused":  # q4_k q, k and a q6_k v (the last layer) still share one dispatch
                calls = [it.call for it in ex.items if it.call.shader == "rms_norm_matmul"]
                assert len(calls) == m.args.n_layers
                assert any(("SLOT_DTYPES", "1") in c.defines for c in calls)
    assert out["fused"] == out["replay-nofuse"] == out["unfused"]


def test_f16_kv_cache_halves_kv_memory():
    """No GPU: the plan's KV bytes for f16 caches are half those of f32 (ctx 4096, SmolLM2's shape)."""
    from vkdecode.benchmark.shapes import shape_args, weight_dtypes
    from vkdecode.executors.plan import required_bytes
    from vkdecode.models import build_program

    args = shape_args("smollm2-135m")
    kv = {
        d: required_bytes(build_program(args, 4096, weight_dtypes(args, "q8_0"), kv_dtype=d), {})["kv_cache"]
        for d in ("f16", "f32")
    }
    assert kv["f32"] == 2 * kv["f16"] == 2 * 2 * 30 * 4096 * 192 * 2

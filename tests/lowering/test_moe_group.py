"""The grouped expert matmuls' launch choices (lowering/moe_group.py), no GPU: their kernels run
against numpy in test_ops_moe.py (f32 tiles) and test_coop.py (tensor cores). And a chunk's
SwiGLU in the grouped up matmul's store (lowering/moe_chunk.py, GLU_SILU) against numpy and the
region's ops: the f32 tiles here, the tensor cores where the device has the coop path (they skip
on lavapipe and run on the H100: `python -m pytest tests/lowering -k coop`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusion.ir import Program
from fusion.partition import partition
from fusion.rules import CHUNK_RULES
from tests.lowering.kernel_harness import NAN_WORD, OpRun, caps_of, nmse
from vkdecode.errors import DeviceLimitError
from vkdecode.lowering.caps import KernelCaps
from vkdecode.lowering.coop import tile_dims
from vkdecode.lowering.moe_group import group_rows, group_tile
from vkdecode.lowering.ops import op_calls
from vkdecode.lowering.regions import region_calls
from vkdecode.quant import quantize
from vkdecode.reference import run_op

# an H100's caps with its tensor-core path (32-lane subgroups, 48 KiB of shared memory)
GPU = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, coop_matrix=True)


def _expert_matmul(e: int, m: int, k: int, rows: int, top: int) -> Program:
    p = Program("t")
    p.meta["arch"] = "qwen3moe"
    p.value("w", (e, m, k), "q4_k", "weight")
    p.value("x", (rows * k,), "f32", "state")
    p.value("ids", (rows * top,), "u32", "state")
    p.value("y", (rows * top * m,), "f32", "output")
    p.op("moe_matmul", ["w", "x", "ids"], ["y"])
    return p


def test_group_tile_is_four_subgroups_of_one_row_block():
    """64 weight rows over 4 subgroups, 16 or 32 slots a subgroup's column (few registers a lane)."""
    assert [group_tile(bn) for bn in (16, 32, 64, 128)] == [
        (4, 1, 1, 1),
        (4, 1, 1, 2),
        (4, 2, 1, 2),
        (4, 4, 1, 2),
    ]
    assert all(tile_dims(group_tile(bn))[:2] == (64, bn) for bn in (16, 32, 64, 128))


def test_qwen3_30b_a3b_prompt_chunk_on_tensor_cores():
    """A 512-row chunk of Qwen3-30B-A3B (8 of 128 experts: 32 slots an expert on average): the
    slots grouped 32 a tile, the gate (768 x 2048) on 64 x 32 tiles of four 32-lane subgroups, one
    workgroup column per 64 rows, a row of the grid per tile (4096 / 32 + 128 at most)."""
    p = _expert_matmul(128, 768, 2048, 512, 8)
    assert group_rows(p, "ids", 128, GPU) == 32
    group, half, mm = op_calls(p, 0, GPU)
    assert group.shader == "moe_group" and mm.shader == "matmul_rows_coop"
    d = dict(mm.defines)
    assert (d["SG_M"], d["SG_N"], d["BLK_M"], d["BLK_N"]) == ("4", "1", "1", "2") and "MOE" in d
    assert mm.spec[0] == 128 and mm.groups == (12, 4096 // 32 + 128, 1)
    # its x (512 rows of 2048) rounded to f16 once, read through the scratch (lowering/half_x.py)
    assert half.shader == "to_f16" and half.spec[1] == 512 * 2048 // 4 and d["X_F16"] == "1"
    assert half.bindings[1] == mm.bindings[2] and mm.bindings[2].value == "scratch:coop.x16"
    without = op_calls(p, 0, replace(GPU, coop_x16=-1))
    assert [c.shader for c in without] == ["moe_group", "matmul_rows_coop"] and "X_F16" not in dict(
        without[1].defines
    )


def test_a_forced_k_step_reaches_the_experts():
    """caps coop_bk=64 gives the grouped expert matmul a 64-wide k step (only where forced: its
    tiles of one block a subgroup lost at 64); an in-dim not whole 64-wide steps leaves the tiles."""
    p = _expert_matmul(128, 768, 2048, 512, 8)
    assert "BK_STEP" not in dict(op_calls(p, 0, GPU)[-1].defines)
    assert dict(op_calls(p, 0, replace(GPU, coop_bk=64))[-1].defines)["BK_STEP"] == "64"
    odd = _expert_matmul(16, 64, 96, 64, 2)
    assert op_calls(odd, 0, replace(GPU, moe_group=1, coop_bk=64))[-1].shader == "matmul_rows"


def test_a_forced_tile_must_match_the_groups():
    p = _expert_matmul(128, 768, 2048, 512, 8)
    assert [c.shader for c in op_calls(p, 0, replace(GPU, coop_tile="2x1:2x2"))][2] == "matmul_rows_coop"
    with pytest.raises(ValueError, match="slots a tile"):
        op_calls(p, 0, replace(GPU, coop_tile="2x2:2x2"))


def test_experts_past_the_storage_range_are_refused_by_name():
    """The expert kernels index every expert in one binding: experts past maxStorageBufferRange
    (lavapipe's 128 MiB against Qwen3.5-35B-A3B's 256 q6_k downs) are a user error naming the
    tensor and the limit (the CLI prints it without a traceback), not a ValueError."""
    p = _expert_matmul(128, 768, 2048, 512, 8)
    with pytest.raises(DeviceLimitError, match=r"w: 128 experts of 768x2048 q4_k .* \(1 MiB\)"):
        op_calls(p, 0, replace(GPU, max_storage_range=1 << 20))


def _glu_chunk(dtype: str, e: int, m: int, k: int, slots: int, xrows: int):
    """A chunk's gate / up / silu_mul over e experts of m x k `dtype` weights, slots chosen at
    random over xrows x rows (slots / xrows a row, as the router's top-k) -> (program, inputs)."""
    rng = np.random.default_rng(e * m + k)
    p = Program("glu")
    p.meta.update(arch="qwen3moe", chunk_rows=xrows)
    for w in ("w_gate", "w_up"):
        p.value(w, (e, m, k), dtype, "weight")
    p.value("x", (xrows * k,), "f32", "state")
    p.value("ids", (slots,), "u32", "state")
    p.value("g", (slots * m,))
    p.value("u", (slots * m,))
    p.value("a", (slots * m,), "f32", "output")
    p.op("moe_matmul", ["w_gate", "x", "ids"], ["g"])
    p.op("moe_matmul", ["w_up", "x", "ids"], ["u"])
    p.op("silu_mul", ["g", "u"], ["a"])
    env = {
        w: quantize((0.1 * rng.standard_normal((e * m, k))).astype(np.float32), dtype)
        for w in ("w_gate", "w_up")
    }
    env.update(
        x=rng.standard_normal(xrows * k).astype(np.float32), ids=rng.integers(0, e, slots).astype(np.uint32)
    )
    nan = np.full(slots * m, NAN_WORD, np.uint32).view(np.float32)  # an unwritten g or a shows
    return p.verify(), {**env, "g": nan, "u": nan}


def _run_calls(device, p: Program, env: dict, caps: KernelCaps, calls) -> dict:
    run = OpRun(device, p, env, caps)
    run.calls = calls
    return run.run()


def check_glu_chunk(device, caps: KernelCaps, case: tuple, shader: str, limit: float) -> tuple:
    """The MOE_MATMUL_SILU_MUL_CHUNK region's calls (moe_group, the gate, the up with GLU_SILU)
    against the float64 reference; returns (a fused, a of the region's ops) for the caller."""
    p, env = _glu_chunk(*case)
    (region,) = [r for r in partition(p, CHUNK_RULES) if r.rule]
    assert region.rule == "MOE_MATMUL_SILU_MUL_CHUNK"
    calls = region_calls(p, region, caps)
    mms = [c for c in calls if c.shader != "to_f16"]  # the coop kernels' x conversions (half_x.py)
    assert [c.shader for c in mms] == ["moe_group", shader, shader]
    assert ("GLU_SILU", "1") in mms[2].defines and mms[2].bindings[-1].value == "g"
    fused = _run_calls(device, p, env, caps, calls)
    apart = _run_calls(device, p, env, caps, region_calls(p, region, caps, fuse=False))
    ref = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in env.items()}
    for op in p.ops:
        ref.update(run_op(op, p, ref, dtype=np.float64))
    np.testing.assert_array_equal(fused["g"], apart["g"])
    assert nmse(fused["a"], ref["a"]) <= limit
    return fused["a"], apart["a"]


# (dtype, experts, rows per expert, in-dim, slots, x rows): odd row counts (a tile's rows past M),
# busy experts (several tiles), f32 / q8_0 / q4_k / mxfp4 weights
GLU_CASES = [("f32", 3, 31, 33, 70, 35), ("q8_0", 8, 64, 96, 40, 20), ("q4_k", 4, 33, 256, 64, 8)]
GLU_CASES += [("mxfp4", 5, 33, 96, 40, 20)]


@pytest.mark.parametrize("case", GLU_CASES, ids=[c[0] for c in GLU_CASES])
def test_glu_silu_grouped_up_matmul(device, case):
    """matmul_rows.comp (MOE, GLU_SILU): a = silu(g) * the up product, to the bit what silu_mul
    makes of the same g and u (its expression on the same floats), within f32 rounding of numpy."""
    caps = replace(caps_of(device), moe_group=1, matmul_coop=-1)
    fused, apart = check_glu_chunk(device, caps, case, "matmul_rows", 1e-8)
    np.testing.assert_array_equal(fused, apart)


# the coop kernel's exact tiles: 64 weight rows a tile, k whole 32-wide steps
GLU_COOP_CASES = [("f16", 8, 64, 64, 70, 35), ("q8_0", 4, 128, 96, 256, 128), ("q4_k", 16, 64, 256, 512, 64)]


@pytest.mark.parametrize("case", GLU_COOP_CASES, ids=[c[0] for c in GLU_COOP_CASES])
def test_glu_silu_grouped_up_matmul_coop(device, case):
    """matmul_rows_coop.comp (MOE, GLU_SILU): the same, each element on its way out of the
    subgroup's staging block. Against the region's ops within a few ulps (silu_mul.comp's
    expression; a GPU compiler may round its division differently in another kernel)."""
    caps = caps_of(device)
    if not caps.coop_matrix:
        pytest.skip(f"no coop path: {device.info.features.get('coop_reason')} (runs on the H100)")
    # g's and u's f16-input errors both reach a (test_coop.py's 1e-6 is one matmul's)
    fused, apart = check_glu_chunk(device, replace(caps, moe_group=1), case, "matmul_rows_coop", 3e-6)
    np.testing.assert_allclose(fused, apart, rtol=1e-6, atol=1e-7)

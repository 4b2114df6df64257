"""RMS_NORM_SILU_MUL_MATMUL_ADD (lowering/gated_norm.py, shaders/gated_norm.glsl): Qwen3.5's
per-head norm of the delta rule's output o, its silu(z) gate, out_proj and the residual add as one
matmul_add dispatch, against the float64 reference of the four ops. Heads whose width is whole
vec4s and not (the scalar loads), in-dims whole vec4s or not, every weight-load family (f32, f16,
quant blocks, K-quants), both reductions, lavapipe's launch shape and a GPU's, the real models'
in-dims (rows cut), row chunks; every case's data tells the per-head norm from a whole-vector
one and the gated x from the ungated.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusion.ir import Program
from fusion.partition import partition
from tests.fusion.programs import gated_tail
from tests.lowering.kernel_harness import OpRun, PackedWeight, caps_of, launch, nmse, run_ops_reference
from vkdecode.lowering.regions import region_calls
from vkdecode.quant import quantize

RULE = "RMS_NORM_SILU_MUL_MATMUL_ADD"
# f32 rounding against float64 (the kernel also sums each head's squares in its own order); the
# x planes of K-quant units on integer dot products round x itself (tests/lowering/test_ops_matmul.py)
LIMIT, LIMIT_TWO_PLANES = 1e-8, 1e-7


def draw(p: Program, heads: int, d: int, seed: int) -> dict:
    """Heads of o at scales 0.1, 1 and 10 in turn, so each head's norm differs from the vector's."""
    rng = np.random.default_rng(seed)
    m, k = p.values["w"].shape
    scale = np.repeat(10.0 ** (np.arange(heads) % 3 - 1), d)
    return {
        "o": (rng.standard_normal(k) * scale).astype(np.float32),
        "z": (2 * rng.standard_normal(k)).astype(np.float32),
        "x": rng.standard_normal(m).astype(np.float32),
        "norm_w": PackedWeight("f32", (d,), {"data": rng.uniform(0.5, 1.5, d).astype(np.float32)}),
        "w": quantize((rng.standard_normal((m, k)) * 0.1).astype(np.float32), p.values["w"].dtype),
    }


def fused_calls(p: Program, caps) -> list:
    (region,) = partition(p)
    assert region.rule == RULE
    return region_calls(p, region, caps)


def check(device, p: Program, env: dict, caps, heads: int, d: int) -> list:
    """The fused calls' s against the reference, and the data's power to tell a wrong kernel."""
    calls = fused_calls(p, caps)
    assert calls and all(c.shader == "matmul_add" and ("GATED_NORM", "1") in c.defines for c in calls)
    got = OpRun(device, p, env, caps, calls=calls).run()["s"]
    ref = run_ops_reference(p, env)
    want = ref["s"]
    idot = any(("KQ_IDOT", "1") in c.defines for c in calls)
    limit = LIMIT_TWO_PLANES if idot else LIMIT
    err = nmse(got, want)
    assert err <= limit, f"{heads} heads of {d}, {p.values['w'].dtype}: nmse {err:.3g} > {limit:g}"
    # one norm over the whole vector (every head's rms alike), or x without its gate, is far off
    whole = PackedWeight("f32", (heads * d,), {"data": np.tile(env["norm_w"].parts["data"], heads)})
    assert nmse(run_ops_reference(p, {**env, "norm_w": whole})["s"], want) > 1e3 * limit
    ungated = env["x"] + env["w"].dequantize().astype(np.float64) @ ref["n"]
    assert nmse(ungated, want) > 1e3 * limit
    return calls


# (heads, head dim, out rows, dtype): the tiny test models' 4 x 8; heads of 18 (scalar head loads)
# over in-dims of 54 (scalar x) and 36 (vec4 x over heads cut mid-vec4); 31 / 32 / 33 around a
# subgroup; f16 rows whole uvec4s and not; quant blocks; K-quant superblocks
CASES = [
    (4, 8, 64, "f32"),
    (3, 18, 33, "f32"),
    (2, 18, 31, "f32"),
    (4, 31, 32, "f32"),
    (3, 32, 65, "f16"),
    (4, 33, 63, "f16"),
    (4, 31, 32, "f16"),
    (2, 32, 33, "q8_0"),
    (8, 16, 64, "q4_1"),
    (2, 128, 31, "q4_k"),
    (16, 16, 33, "q6_k"),
]


@pytest.mark.parametrize("shape", ["sg", "smem", "gpu"])
@pytest.mark.parametrize(
    "heads,d,m,dtype", [pytest.param(*c, id=f"{c[3]}-{c[0]}x{c[1]}-m{c[2]}") for c in CASES]
)
def test_fused_equals_the_ops(device, heads, d, m, dtype, shape):
    p = gated_tail(heads, d, m, dtype)
    check(device, p, draw(p, heads, d, heads * 100 + d + m), launch(device, shape), heads, d)


# Qwen3.5-27B's out_proj in-dim (48 value heads of 128) and Qwen3.5-35B-A3B's (32 of 128), rows cut
@pytest.mark.parametrize("shape", ["sg", "gpu"])
@pytest.mark.parametrize("heads,dtype", [(48, "q8_0"), (32, "q4_k"), (48, "f16")])
def test_real_in_dims(device, heads, dtype, shape):
    p = gated_tail(heads, 128, 96, dtype)
    calls = check(device, p, draw(p, heads, 128, heads), launch(device, shape), heads, 128)
    d, n_heads, lanes, _ = calls[0].spec[4:]
    assert (d, n_heads) == (128, heads) and 1 <= lanes <= 32


def test_row_chunks(device):
    """A weight past maxStorageBufferRange runs as row chunks, each call taking the norms itself."""
    p = gated_tail(4, 8, 300, "f32")
    caps = replace(caps_of(device), max_storage_range=32 << 10)  # 256 rows of 128 bytes
    calls = check(device, p, draw(p, 4, 8, 3), caps, 4, 8)
    assert [c.bindings[0].rows for c in calls] == [256, 44]


def test_no_room_runs_the_ops(device):
    """Where the heads' sums would not fit the shared memory beside the matvec's, the region runs
    its four ops' kernels (always correct)."""
    p = gated_tail(64, 8, 16, "f32")
    (region,) = partition(p)
    caps = replace(caps_of(device), max_shared=1024)
    assert [c.shader for c in region_calls(p, region, caps)] == ["rms_norm", "silu_mul", "matmul", "add"]

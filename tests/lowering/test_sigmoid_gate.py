"""The sigmoid gates in matmul_add (lowering/sigmoid_gate.py) against the float64 reference of their
three ops: MATMUL_SIGMOID_SCALE_ADD (SIGMOID_OUT: a gated shared expert's down, scaled by its
one-float gate logit, plus the residual) and SIGMOID_SCALE_MATMUL_ADD (SIGMOID_X: Qwen3.5's attention
output gated element by element, o_proj, plus the residual). In-dims around a subgroup and the real
models', every weight-load family (f32, f16, quant blocks, K-quants), both reductions, lavapipe's
launch shape and a GPU's, row chunks, and the next norm's inputs written in the epilogue
(norm_pre); every case's data tells a missing sigmoid, a flipped gate or a missing residual.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusion.ir import Program
from fusion.partition import partition
from tests.fusion.programs import gated_attention_tail, shared_tail
from tests.lowering.kernel_harness import OpRun, PackedWeight, caps_of, launch, nmse, run_ops_reference
from vkdecode.lowering.norm_pre import add_norm_pre
from vkdecode.lowering.regions import region_calls
from vkdecode.quant import quantize

# rule, define, input gated in the program (tests/fusion/programs.py)
GATED = {
    "out": ("MATMUL_SIGMOID_SCALE_ADD", "SIGMOID_OUT", "a"),
    "x": ("SIGMOID_SCALE_MATMUL_ADD", "SIGMOID_X", "o"),
}
# f32 rounding against float64; the x planes of K-quant units on integer dot products round x
# itself (tests/lowering/test_ops_matmul.py)
LIMIT, LIMIT_TWO_PLANES = 1e-8, 1e-7
GATES = (-2.5, -0.4, 0.8, 3.0)  # closed to wide open, none at 0 (where sigmoid(g) = sigmoid(-g))


def tail(gate: str, k: int, m: int, dtype: str) -> Program:
    return shared_tail(k, m, dtype, gate_matmul=False) if gate == "out" else gated_attention_tail(k, m, dtype)


def draw(p: Program, gate: str, seed: int) -> dict:
    """W x and r of one scale, so a missing residual or a wrong gate shows; the out gate one of
    GATES, the x gates N(0, 1.5) each."""
    rng = np.random.default_rng(seed)
    m, k = p.values["w"].shape
    x = GATED[gate][2]
    g = np.array([GATES[seed % len(GATES)]]) if gate == "out" else 1.5 * rng.standard_normal(k)
    return {
        x: rng.standard_normal(k).astype(np.float32),
        "g": g.astype(np.float32),
        "r": rng.standard_normal(m).astype(np.float32),
        "w": quantize((rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32), p.values["w"].dtype),
    }


def wrong_sums(env: dict, gate: str) -> list[np.ndarray]:
    """s without the sigmoid, with sigmoid(-g) and without the residual: what a broken kernel stores."""
    w = env["w"].dequantize().astype(np.float64)
    x, r = env[GATED[gate][2]].astype(np.float64), env["r"]
    sg = 1 / (1 + np.exp(-env["g"].astype(np.float64)))
    if gate == "out":
        return [r + w @ x, r + (1 - sg) * (w @ x), sg * (w @ x)]
    return [r + w @ x, r + w @ ((1 - sg) * x), w @ (sg * x)]


def check(device, p: Program, gate: str, env: dict, caps) -> list:
    """The fused calls' s against the reference, and the data's power to tell a wrong kernel."""
    rule, define, _ = GATED[gate]
    (region,) = partition(p)
    assert region.rule == rule
    calls = region_calls(p, region, caps)
    assert calls and all(c.shader == "matmul_add" and (define, "1") in c.defines for c in calls)
    got = OpRun(device, p, env, caps, calls=calls).run()["s"]
    want = run_ops_reference(p, env)["s"]
    limit = LIMIT_TWO_PLANES if any(("KQ_IDOT", "1") in c.defines for c in calls) else LIMIT
    err = nmse(got, want)
    assert err <= limit, f"{p.values['w'].shape} {p.values['w'].dtype}: nmse {err:.3g} > {limit:g}"
    for wrong in wrong_sums(env, gate):
        assert nmse(wrong, want) > 1e3 * limit
    return calls


# (in-dim, out rows, dtype): the tiny models' shared expert (48 -> 64); 31 / 32 / 33 around a
# subgroup on either side; f16 rows whole uvec4s and not; quant blocks; K-quant superblocks
CASES = [
    (48, 64, "f32"),
    (31, 33, "f32"),
    (32, 31, "f32"),
    (33, 32, "f32"),
    (64, 33, "f16"),
    (66, 31, "f16"),
    (34, 32, "f16"),
    (32, 33, "q8_0"),
    (96, 31, "q8_0"),
    (64, 32, "q4_1"),
    (256, 31, "q4_k"),
    (256, 33, "q6_k"),
]


@pytest.mark.parametrize("shape", ["sg", "smem", "gpu"])
@pytest.mark.parametrize("k,m,dtype", [pytest.param(*c, id=f"{c[2]}-k{c[0]}-m{c[1]}") for c in CASES])
@pytest.mark.parametrize("gate", GATED)
def test_fused_equals_the_ops(device, gate, k, m, dtype, shape):
    p = tail(gate, k, m, dtype)
    check(device, p, gate, draw(p, gate, k + m), launch(device, shape))


# the shared experts' in-dims: Qwen2-MoE-A2.7B's 5632, Qwen3.5-35B-A3B's and Qwen3-Next-80B-A3B's
# 512; the gated attention's: Qwen3.5-27B's 24 heads of 256, Qwen3.5-35B-A3B's 16 (rows cut from
# their hidden sizes)
REAL = [("out", 5632, "q8_0"), ("out", 5632, "f16"), ("out", 512, "q4_k"), ("out", 512, "q6_k")]
REAL += [("x", 6144, "q8_0"), ("x", 4096, "q4_k"), ("x", 4096, "f16")]


@pytest.mark.parametrize("shape", ["sg", "gpu"])
@pytest.mark.parametrize("gate,k,dtype", REAL)
def test_real_in_dims(device, gate, k, dtype, shape):
    p = tail(gate, k, 96, dtype)
    check(device, p, gate, draw(p, gate, k), launch(device, shape))


@pytest.mark.parametrize("gate", GATED)
def test_row_chunks(device, gate):
    """A weight past maxStorageBufferRange runs as row chunks, each call reading the gate."""
    p = tail(gate, 32, 300, "f32")
    caps = replace(caps_of(device), max_storage_range=32 << 10)  # 256 rows of 128 bytes
    calls = check(device, p, gate, draw(p, gate, 3), caps)
    assert [c.bindings[0].rows for c in calls] == [256, 44]


def test_writes_the_next_norms_inputs(device):
    """Its call stays a matmul_add, so norm_pre pairs it with the next layer's norm + matvec: the
    epilogue writes s * norm_w and the sums of s^2 the consumer reads, and both outputs match."""
    p = tail("out", 48, 64, "f32")
    p.value("nw", (64,), "f32", "weight")
    p.value("n", (64,), "f32", "activation")
    p.value("wq", (40, 64), "f32", "weight")
    p.value("q", (40,), "f32", "output")
    p.op("rms_norm", ["s", "nw"], ["n"], eps=1e-6)
    p.op("matmul", ["wq", "n"], ["q"])
    regions = partition(p)
    assert [r.rule for r in regions] == [GATED["out"][0], "RMS_NORM_MATMUL"]
    caps = replace(caps_of(device), norm_pre=1)
    calls = [c for r in regions for c in region_calls(p, r, caps)]
    calls, _ = add_norm_pre(p, calls, [0, 1], caps)
    assert ("NORM_OUT", "1") in calls[0].defines and ("NORM_PRE", "1") in calls[1].defines
    rng = np.random.default_rng(5)
    env = draw(p, "out", 1)
    env["nw"] = PackedWeight("f32", (64,), {"data": rng.uniform(0.5, 1.5, 64).astype(np.float32)})
    env["wq"] = quantize((rng.standard_normal((40, 64)) / 8).astype(np.float32), "f32")
    got = OpRun(device, p, env, caps, calls=calls).run()
    want = run_ops_reference(p, env)
    for v in ("s", "q"):
        assert nmse(got[v], want[v]) <= LIMIT, v

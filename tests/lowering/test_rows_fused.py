"""The fused narrow-chunk projections (vkdecode/kernels_rows_fused.py, matmul_rows_narrow_fused.comp)
against the float64 reference of their ops: norm + q/k/v (+ biases), (norm +) gate/up + SwiGLU /
GeGLU (+ biases), projection (+ bias) + residual add; every weight dtype (unit and element paths,
K-quants, a Q4_K_M-style q4_k/q6_k mix in one dispatch), chunk widths over every BN (2, 3, 9, 16 rows:
16/16/4/4 weight rows per workgroup), row counts off the workgroup's rows, subgroup and
shared-memory reductions. GPU caps are forced (lavapipe keeps the per-op tiled kernels)."""

from dataclasses import replace

import numpy as np
import pytest

from fusion.chunk_rules import ROW_RULES
from fusion.ir import Program
from fusion.partition import partition
from tests.lowering.kernel_harness import OpRun, caps_of, nmse
from vkdecode.lowering.regions import region_calls
from vkdecode.lowering.rows_fused import SHADER, chunk_rules, narrow_tile
from vkdecode.quant import pack_float, quantize
from vkdecode.reference import run_op

LIMIT = 1e-8  # same weights both sides: f32 rounding only (as test_kernels_rows.py)
EPS = 1e-5


class Chunk:
    """A chunk-like Program (meta chunk_rows = T, matmuls with rows=T) and its inputs."""

    def __init__(self, rows: int, k: int, seed: int):
        self.p = Program(f"fused-rows-{rows}")
        self.p.meta["chunk_rows"] = rows
        self.rows, self.k, self.env = rows, k, {}
        self.rng = np.random.default_rng(seed)

    def input(self, name, n, scale=1.0):
        self.p.value(name, (n,), "f32", "state")  # no producer: a state value (kernel_harness.one_op)
        self.env[name] = (self.rng.standard_normal(n) * scale).astype(np.float32)
        return name

    def weight(self, name, shape, dtype):
        self.p.value(name, shape, dtype, "weight")
        w = (self.rng.standard_normal(shape) * 0.1).astype(np.float32)
        if len(shape) == 1:
            w = w + 1.0
        self.env[name] = quantize(w, dtype) if len(shape) == 2 else pack_float(w, "f32")
        return name

    def act(self, name, n, kind="activation"):
        self.p.value(name, (n,), "f32", kind)
        return name

    def norm(self, x):
        h = self.act("h", self.rows * self.k)
        self.p.op("rms_norm", (x, self.weight("norm_w", (self.k,), "f32")), (h,), eps=EPS)
        return h

    def matmul(self, w, x, y, m, bias=False, kind="activation"):
        out = self.act(y, self.rows * m, "activation" if bias else kind)
        self.p.op("matmul", (w, x), (out,), rows=self.rows)
        if bias:
            yb = self.act(y + "_b", self.rows * m, kind)
            self.p.op("add", (out, self.weight("b_" + y, (m,), "f32")), (yb,))
            out = yb
        return out


def qkv(rows, dtypes, ms=(70, 33, 33), k=64, bias=False, seed=0):
    c = Chunk(rows, k, seed)
    h = c.norm(c.input("x", rows * k))
    for name, m, dt in zip("qkv", ms, dtypes):
        c.matmul(c.weight("w" + name, (m, k), dt), h, name, m, bias, kind="output")
    return c


def glu(rows, dtype, m=70, k=64, norm=True, act="silu", bias=False, seed=0):
    c = Chunk(rows, k, seed)
    x = c.input("x", rows * k)
    h = c.norm(x) if norm else x
    g = c.matmul(c.weight("w_gate", (m, k), dtype), h, "g", m, bias)
    u = c.matmul(c.weight("w_up", (m, k), dtype), h, "u", m, bias)
    c.p.op(f"{act}_mul", (g, u), (c.act("a", rows * m, "output"),))
    return c


def matmul_add(rows, dtype, m=70, k=64, bias=False, seed=0):
    c = Chunk(rows, k, seed)
    # the residual is an activation (MATMUL_ADD's pattern): the sum of two inputs
    r = c.act("r", rows * m)
    c.p.op("add", (c.input("r0", rows * m), c.input("r1", rows * m)), (r,))
    y = c.matmul(c.weight("w", (m, k), dtype), c.input("x", rows * k), "y", m, bias)
    c.p.op("add", (y, r), (c.act("s", rows * m, "output"),))
    return c


def run(device, c: Chunk, caps, want_regions: dict):
    """Run the partitioned program's calls on the device; compare every output with float64."""
    p = c.p.verify()
    regions = partition(p, chunk_rules(p, caps))
    assert {r.name: len(r.ops) for r in regions if r.rule} == want_regions
    calls = [call for r in regions for call in region_calls(p, r, caps)]
    env = dict(c.env)
    for v in p.values.values():  # intermediates the calls still bind start as NaN
        if v.kind == "activation":
            env[v.name] = np.full(v.numel, np.nan, np.float32)
    runner = OpRun(device, p, env, caps)
    runner.calls = calls
    got = runner.run()
    ref = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in c.env.items()}
    for op in p.ops:
        ref.update(run_op(op, p, ref, dtype=np.float64))
    for name in p.outputs():
        err = nmse(got[name], ref[name])
        assert err <= LIMIT, f"{name}: nmse {err:.3g}"
    return calls


def gpu_caps(device, **over):
    return replace(caps_of(device, matmul_narrow=16, chunk_fuse=1), **over)


UNIT = ("f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0")


@pytest.mark.parametrize("dtype", UNIT + ("q5_1", "iq4_nl"))
@pytest.mark.parametrize("rows", [2, 3, 9, 16])
def test_norm_qkv(device, dtype, rows):
    calls = run(device, qkv(rows, (dtype,) * 3, seed=rows), gpu_caps(device), {"RMS_NORM_MATMUL_ROWS": 4})
    assert [c.shader for c in calls] == [SHADER]  # q, k and v in one dispatch


@pytest.mark.parametrize(
    "dtypes",
    [("q4_k",) * 3, ("q4_k", "q4_k", "q6_k"), ("q5_k", "q2_k", "q3_k"), ("q8_0", "q4_1", "q5_0")],
    ids="-".join,
)
def test_norm_qkv_k_quants_and_mixed(device, dtypes):
    """K-quants decode element by element; a quant mix (Q4_K_M's q4_k q/k and q6_k v) shares one
    dispatch, each slot with its own dtype (SLOT_DTYPES)."""
    c = qkv(9, dtypes, ms=(70, 33, 5), k=256, seed=3)
    (call,) = run(device, c, gpu_caps(device), {"RMS_NORM_MATMUL_ROWS": 4})
    assert (("SLOT_DTYPES", "1") in call.defines) == (len(set(dtypes)) > 1)


def test_norm_qkv_float_and_quant_split(device):
    """f16 and quant projections of one norm: one dispatch per dtype group."""
    calls = run(device, qkv(5, ("f16", "q8_0", "f16")), gpu_caps(device), {"RMS_NORM_MATMUL_ROWS": 4})
    assert [c.shader for c in calls] == [SHADER, SHADER]


@pytest.mark.parametrize("sg", [True, False], ids=["sg", "smem"])
@pytest.mark.parametrize("dtype,k", [("f16", 40), ("f32", 64), ("q4_1", 96)], ids=["f16-elem", "f32", "q4_1"])
def test_norm_qkv_biases_and_reductions(device, dtype, k, sg):
    """Qwen2's biases, an in-dim off the 32-wide units (element path), subgroup / shared-memory sums."""
    caps = gpu_caps(device)
    caps = replace(caps, subgroup_arithmetic=sg and caps.subgroup_arithmetic)
    run(device, qkv(9, (dtype,) * 3, k=k, bias=True, seed=k), caps, {"RMS_NORM_MATMUL_ROWS": 7})


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0", "q4_1", "q4_k"])
@pytest.mark.parametrize("rows", [3, 9, 16])
def test_norm_gate_up_silu(device, dtype, rows):
    k = 256 if dtype == "q4_k" else 64
    calls = run(
        device, glu(rows, dtype, k=k, seed=rows), gpu_caps(device), {"RMS_NORM_MATMUL_SILU_MUL_ROWS": 4}
    )
    assert [c.shader for c in calls] == [SHADER]


@pytest.mark.parametrize(
    "norm,act,bias",
    [(True, "gelu", False), (False, "silu", False), (False, "gelu", False), (True, "silu", True)],
)
def test_glu_variants(device, norm, act, bias):
    name = ("RMS_NORM_" if norm else "") + "MATMUL_" + ("BIAS_" if bias else "") + f"{act.upper()}_MUL_ROWS"
    ops = 3 + norm + 2 * bias
    run(device, glu(9, "q4_0", m=33, norm=norm, act=act, bias=bias), gpu_caps(device), {name: ops})


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q4_1", "q6_k"])
@pytest.mark.parametrize("rows,bias", [(2, False), (9, False), (9, True), (16, True)])
def test_matmul_add(device, dtype, rows, bias):
    k = 256 if dtype == "q6_k" else 96
    name = "MATMUL_BIAS_ADD_ROWS" if bias else "MATMUL_ADD_ROWS"
    calls = run(
        device, matmul_add(rows, dtype, k=k, bias=bias, seed=rows), gpu_caps(device), {name: 2 + bias}
    )
    assert [c.shader for c in calls] == ["add", SHADER]  # the residual's own add, then the fused call


def test_only_where_the_narrow_matmul_runs(device):
    """CPU caps (lavapipe's own), chunks wider than 16 rows, 1-row chunks: no rules, per-op kernels."""
    p = qkv(9, ("f16",) * 3).p
    assert narrow_tile(p, caps_of(device, matmul_narrow=-1)) is None
    if getattr(device.info, "device_type", "") == "cpu":
        assert chunk_rules(p, caps_of(device)) == ()
    assert chunk_rules(p, gpu_caps(device)) == ROW_RULES
    assert chunk_rules(p, gpu_caps(device, chunk_fuse=0)) == ()  # the default: off
    assert narrow_tile(qkv(17, ("f16",) * 3).p, gpu_caps(device, matmul_narrow=0)) is None
    assert narrow_tile(qkv(1, ("f16",) * 3).p, gpu_caps(device)) is None
    assert narrow_tile(p, gpu_caps(device, max_shared=4 * 64 * 65)) is None  # the plain narrow kernel's only

"""matmul (matvec) kernels for every weight dtype against the float64 reference.

Ids read `matmul-<dtype>-<out>x<in>[-<variant>]` (the weight's [out, in] shape), e.g.
`-k "matmul-q4_1-576x1536"`. Both reduction paths run: `-sg` (subgroupAdd) and `-smem`
(shared-memory tree), whatever the device would choose.
"""

from dataclasses import replace

import numpy as np
import pytest

from tests.lowering.kernel_harness import caps_of, nmse, one_op, run_and_reference
from vkdecode.lowering.calls import row_bytes, weight_parts
from vkdecode.lowering.ops import op_calls
from vkdecode.quant import quantize

# Weights are the same (de)quantised values on both sides, so the only error is f32 rounding in
# the GPU's dot products against a float64 reference: ~eps^2 * (terms summed) ~ 1e-10 even for
# 4864-long rows. The limits leave a margin for drivers that reassociate or contract to FMA;
# f16 / q* inputs are not rounded again on the GPU, so they share the f32 bound.
LIMIT = {
    "f32": 1e-8,
    "f16": 1e-8,
    "q8_0": 1e-8,
    "q4_0": 1e-8,
    "q4_1": 1e-8,
    "q5_0": 1e-8,
    "q5_1": 1e-8,
    "iq4_nl": 1e-8,
    "mxfp4": 1e-8,
    "q4_k": 1e-8,
    "q5_k": 1e-8,
    "q6_k": 1e-8,
    "q2_k": 1e-8,
    "q3_k": 1e-8,
}
DTYPES = list(LIMIT)
K_TYPES = ("q4_k", "q5_k", "q6_k", "q2_k", "q3_k")

STRADDLE = {  # (out, in) around 8 / 32 / 64 and both load paths (wide uvec4 and scalar)
    "f32": [(1, 32), (31, 33), (32, 64), (33, 31), (63, 65), (64, 63), (65, 128), (9, 1)],
    "f16": [(1, 32), (31, 34), (33, 64), (63, 66), (65, 128), (64, 8), (7, 2)],
    "q": [(1, 32), (31, 64), (33, 96), (63, 32), (65, 256), (64, 160)],
    # K-quants: in-dims are whole 256-superblocks (GGUF guarantees it)
    "k": [(1, 256), (31, 512), (32, 768), (33, 256), (63, 1280), (65, 512)],
}
REAL = [(1536, 576), (576, 1536), (896, 4864), (3072, 1024)]
REAL_K = [(1024, 1024), (1024, 3072), (3072, 1024), (896, 4864)]


def _case(dtype, out, n_in, seed=0):
    rng = np.random.default_rng(seed + out * 7919 + n_in)
    w = quantize((rng.standard_normal((out, n_in)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(n_in).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((out, n_in), dtype, "weight"), "x": ((n_in,), "f32", "activation")},
        {"y": ((out,), "f32", "output")},
    )
    return p, {"w": w, "x": x}


# K-quant units on integer dot products with x as two byte planes (16 bits of each 16-element
# group's largest |x|, calls.x_planes; GPUs where accelerated): x itself is rounded, H200 q4_k
# 37 x 1536 nmse 1.5e-8
LIMIT_TWO_PLANES = 1e-7


def _check(device, dtype, out, n_in, caps, seed=0):
    from vkdecode.lowering.calls import x_planes

    p, env = _case(dtype, out, n_in, seed)
    got, want = run_and_reference(device, p, env, caps)
    err = nmse(got["y"], want["y"])
    idot = any(("KQ_IDOT", "1") in c.defines for c in op_calls(p, 0, caps))
    limit = LIMIT_TWO_PLANES if idot and x_planes(caps) == 2 else LIMIT[dtype]
    assert err <= limit, f"matmul {dtype} [{out}, {n_in}]: nmse {err:.3g} > {limit:g}"
    return p


def _paths(device):
    caps = caps_of(device)
    out = {"smem": replace(caps, subgroup_arithmetic=False)}
    if caps.subgroup_arithmetic:
        out["sg"] = caps
    return out


def _straddle_params():
    for dt in DTYPES:
        for out, n_in in STRADDLE["k" if dt in K_TYPES else "q" if dt not in ("f32", "f16") else dt]:
            for path in ("sg", "smem"):
                yield pytest.param(dt, out, n_in, path, id=f"matmul-{dt}-{out}x{n_in}-{path}")


@pytest.mark.parametrize("dtype,out,n_in,path", list(_straddle_params()))
def test_matmul_straddle(device, dtype, out, n_in, path):
    paths = _paths(device)
    if path not in paths:
        pytest.skip("device has no subgroup arithmetic")
    _check(device, dtype, out, n_in, paths[path])


@pytest.mark.parametrize(
    "dtype,out,n_in",
    [
        pytest.param(dt, o, i, id=f"matmul-{dt}-{o}x{i}")
        for dt in DTYPES
        for o, i in (REAL_K if dt in K_TYPES else REAL)
    ],
)
def test_matmul_real_sizes(device, dtype, out, n_in):
    _check(device, dtype, out, n_in, caps_of(device))


# Workgroup shapes the heuristics may not pick on this device: one subgroup per workgroup (no
# shared-memory stage), rows per workgroup that do not divide M (tail rows clamp), big workgroups.
VARIANTS = [
    ("q4_1", 67, 576, {"matvec_wg": 8, "matvec_rows": 1}),
    ("q8_0", 67, 576, {"matvec_rows": 3}),
    ("f16", 65, 1024, {"matvec_rows": 4, "matvec_wg": 64}),
    ("q5_0", 33, 1536, {"matvec_rows": 2, "matvec_wg": 256}),
    ("f32", 70, 30, {"matvec_rows": 8, "matvec_wg": 16}),
    ("q4_k", 67, 512, {"matvec_wg": 8, "matvec_rows": 3}),
    ("q6_k", 33, 1024, {"matvec_rows": 2, "matvec_wg": 256}),
    ("q5_k", 35, 256, {"matvec_rows": 4, "matvec_wg": 16}),
    # both K-quant unit widths (dequant.glsl KWIDE), whatever this device's default
    ("q4_k", 67, 512, {"kwide": -1}),
    ("q6_k", 33, 1024, {"kwide": -1}),
    ("q3_k", 35, 512, {"kwide": -1}),
    ("q4_k", 67, 512, {"kwide": 1}),
    ("q6_k", 33, 1024, {"kwide": 1}),
    ("q3_k", 35, 512, {"kwide": 1}),
    ("q5_k", 35, 256, {"kwide": 1, "matvec_wg": 8}),
    ("q2_k", 35, 768, {"kwide": 1, "matvec_rows": 3}),
    # both nibble decodes of wide units (dequant.glsl pos4 in place, NIB_OLD), whatever the default
    ("q4_k", 67, 512, {"kwide": 1, "kq_inplace": 0}),
    ("q4_k", 67, 512, {"kwide": 1, "kq_inplace": -1}),
    ("q5_k", 35, 256, {"kwide": 1, "kq_inplace": 0}),
    ("q6_k", 33, 1024, {"kwide": 1, "kq_inplace": -1}),
    # both loop bodies of wide q4_k / q6_k units (kwide_rows.glsl split, KW_JOINT), and the
    # GPU shapes of the split q4_k ones (4 rows of 64 lanes, 8 of 128 past 4096-wide rows)
    ("q4_k", 67, 512, {"kwide": 1, "kw_split": -1}),
    ("q6_k", 33, 1024, {"kwide": 1, "kw_split": -1}),
    ("q4_k", 67, 512, {"kwide": 1, "kw_split": 0, "matvec_wg": 64, "matvec_rows": 4}),
    ("q4_k", 37, 1536, {"kwide": 1, "kw_split": 0, "matvec_wg": 32, "matvec_rows": 8}),
    ("q6_k", 33, 1024, {"kwide": 1, "kw_split": 0, "matvec_rows": 5}),
]


@pytest.mark.parametrize(
    "dtype,out,n_in,tune",
    [
        pytest.param(
            d,
            o,
            i,
            t,
            id=f"matmul-{d}-{o}x{i}-" + "-".join(f"{k.removeprefix('matvec_')}{v}" for k, v in t.items()),
        )
        for d, o, i, t in VARIANTS
    ],
)
@pytest.mark.parametrize("path", ["sg", "smem"])
def test_matmul_workgroup_shapes(device, dtype, out, n_in, tune, path):
    paths = _paths(device)
    if path not in paths:
        pytest.skip("device has no subgroup arithmetic")
    _check(device, dtype, out, n_in, replace(paths[path], **tune))


@pytest.mark.parametrize("dtype,rows", [("q4_k", 4), ("q6_k", 2)])
def test_matmul_balanced_wide_rows(device, dtype, rows):
    """kernels.kw_balanced's launch shape: workgroups of whole subgroups that are not a power of two
    (units / 2 lanes of 10240-wide rows: 160), two wide units a lane. Only the subgroup reductions:
    kw_balanced never applies without them (the shared-memory trees need a power of two)."""
    paths = _paths(device)
    if "sg" not in paths:
        pytest.skip("device has no subgroup arithmetic, where kw_balanced never applies")
    _check(
        device, dtype, 37, 10240, replace(paths["sg"], kwide=1, kw_split=-1, matvec_wg=160, matvec_rows=rows)
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_row_split(device, dtype):
    """A weight larger than maxStorageBufferRange (faked small here) runs as row-range calls."""
    out, n_in = 1100, 256 if dtype in K_TYPES else 64
    caps = caps_of(device)
    rb = max(row_bytes(dtype, n_in, part) for part in weight_parts(dtype))
    caps = replace(caps, max_storage_range=rb * 300)  # 256-row slices: 5 calls
    p = _check(device, dtype, out, n_in, caps, seed=3)
    calls = op_calls(p, 0, caps)
    assert len(calls) == 5
    assert [c.bindings[0].row_start for c in calls] == [0, 256, 512, 768, 1024]
    assert calls[-1].bindings[0].rows == 1100 - 1024


def test_matmul_2d_grid(device):
    """More than 65535 workgroups (an lm_head with one row per workgroup) go as a 2-D grid."""
    caps = replace(caps_of(device), matvec_rows=1)
    p = _check(device, "f16", 70001, 32, caps, seed=5)
    assert op_calls(p, 0, caps)[0].groups[1] == 2


@pytest.mark.parametrize("dtype", ["q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k"])
def test_matmul_nibble_magic(device, dtype):
    """The NIBBLE_MAGIC A/B switch (int -> float by float bits, bench/matvec_bench.py --ab) gives
    the same results as the default conversion."""
    from tests.lowering.kernel_harness import OpRun
    from vkdecode.reference import run_op

    out, n_in = 33, 512
    p, env = _case(dtype, out, n_in, seed=9)
    run = OpRun(device, p, env, caps_of(device))
    run.calls = [replace(c, defines=c.defines + (("NIBBLE_MAGIC", "1"),)) for c in run.calls]
    got = run.run()
    want = run_op(p.ops[0], p, dict(env), dtype=np.float64)
    assert nmse(got["y"], want["y"]) <= LIMIT[dtype]

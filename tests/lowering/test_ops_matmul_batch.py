"""A batched decode step's matmul (attr batch, rows=XR; rows.batch_matvec): the decode matvec over
XR rows of x (MV_XROWS) against the float64 reference, in the units a GPU takes: split wide q4_k /
q6_k units (kwide_rows.glsl's x-row loop, floats and integer dot products), whole wide units
(KW_JOINT, lavapipe's), and a non-K quant's 8-weight units. Every call's defines are checked, so a
silent fallback to another path fails. Ids: `xr<XR>-<dtype>-<out>x<in>`.
"""

from dataclasses import replace

import numpy as np
import pytest

from tests.lowering.kernel_harness import caps_of, nmse, one_op, run_and_reference
from vkdecode.lowering.ops import XR_ACC, batch_rows, op_calls
from vkdecode.quant import quantize

LIMIT = 1e-8  # same weights both sides: f32 rounding (test_ops_matmul.py; x to 22 bits with KQ_IDOT)


def _case(dtype, xr, out, n_in, lazy=False):
    """The op (xr 1: the single-row matvec) and, unless lazy, its weight and x."""
    attrs = {"rows": xr, "batch": True} if xr > 1 else {}
    p = one_op(
        "matmul",
        {"w": ((out, n_in), dtype, "weight"), "x": ((xr * n_in,), "f32", "activation")},
        {"y": ((xr * out,), "f32", "output")},
        **attrs,
    )
    if lazy:
        return p, None
    rng = np.random.default_rng(31 * xr + out * 7919 + n_in)
    w = quantize((rng.standard_normal((out, n_in)) * 0.1).astype(np.float32), dtype)
    # rows of x of different scales: a row read in place of another changes the result
    x = (rng.standard_normal((xr, n_in)) * (1.0 + np.arange(xr))[:, None]).astype(np.float32).ravel()
    return p, {"w": w, "x": x}


def _split_caps(device, idot: int, xplanes: int = 0):
    """Split wide units as GPUs take them (test_ops_moe.py): kwide, kw_split, kq_idot forced, the
    automatic launch shapes (lavapipe's are 16 lanes x 16 rows)."""
    caps = caps_of(device, kwide=1, kw_split=1, kq_idot=idot, matvec_wg=0, matvec_rows=0, xplanes=xplanes)
    if idot > 0 and not caps.integer_dot:
        pytest.skip("no shaderIntegerDotProduct on this device")
    return caps


def _run(device, caps, dtype, xr, out, n_in, want_defines, planes=False):
    """The op's calls (with planes: xplanes.comp first, lowering/xplanes.py) against the reference;
    returns the GPU's y."""
    p, env = _case(dtype, xr, out, n_in)
    calls = op_calls(p, 0, caps)
    assert [c.shader for c in calls] == ["xplanes"] * planes + ["matmul"] * (len(calls) - planes)
    for call in calls[planes:]:
        d = dict(call.defines)
        assert d.get("MV_XROWS") == str(xr) and ("KW_XPLANES" in d) == planes, d
        for k, v in want_defines.items():
            assert (k in d) == v, (k, d)
    got, want = run_and_reference(device, p, env, caps)
    err = nmse(got["y"], want["y"])
    assert err <= LIMIT, f"xr {xr} {dtype} [{out}, {n_in}]: nmse {err:.3g}"
    return got["y"]


SPLIT = [(xr, o, i) for xr in (2, 4, 8) for o, i in ((37, 256), (19, 768))] + [(4, 9, 4096)]


@pytest.mark.parametrize("idot", [-1, 1])
@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
@pytest.mark.parametrize("xr,out,n_in", SPLIT, ids=[f"xr{x}-{o}x{i}" for x, o, i in SPLIT])
def test_batch_matvec_split_wide_units(device, dtype, xr, out, n_in, idot):
    """kwide_rows.glsl's x-row loop: each x row through the rows' weight words (37 rows: the last
    workgroup's tail rows clamp; 768: 24 units a row, 3 superblocks)."""
    caps = _split_caps(device, idot)
    want = {"WVEC": True, "KW_JOINT": False, "KQ_IDOT": idot > 0}
    y = _run(device, caps, dtype, xr, out, n_in, want, planes=idot > 0)
    if idot > 0:  # x planes made once (caps.xplanes 0) or per unit (< 0): the same bits
        alone = _run(device, _split_caps(device, idot, -1), dtype, xr, out, n_in, want)
        assert np.array_equal(y, alone)


@pytest.mark.parametrize("rows", [8, 16])
@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
def test_batch_matvec_set_rows_per_workgroup(device, dtype, rows):
    """caps.batch_rows (A/B: more weight rows share each workgroup's x loads): 37 rows end in a
    partial workgroup."""
    caps = replace(_split_caps(device, 1), batch_rows=rows)
    (call,) = op_calls(_case(dtype, 8, 37, 768, lazy=True)[0], 0, replace(caps, xplanes=-1))
    assert call.spec[3] == rows, call.spec
    _run(device, caps, dtype, 8, 37, 768, {"WVEC": True, "KQ_IDOT": True}, planes=True)


@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
@pytest.mark.parametrize("xr", [2, 8])
def test_batch_matvec_whole_wide_units(device, dtype, xr):
    """Whole wide units (KW_JOINT: lavapipe's kw_split -1), matvec.glsl's own x-row loop."""
    caps = caps_of(device, kwide=1, kw_split=-1)
    _run(device, caps, dtype, xr, 37, 768, {"WVEC": True, "KW_JOINT": True})


@pytest.mark.parametrize("xr", [2, 4, 8])
def test_batch_matvec_q4_1(device, xr):
    """A non-K quant: 8-weight units, as before wide K-quant units took several rows."""
    _run(device, _split_caps(device, -1), "q4_1", xr, 37, 768, {"WVEC": False})


def test_batch_rows_bounds_accumulators():
    """Automatic rows per workgroup shrink to XR_ACC (or caps.batch_acc) // XR accumulators; set
    ones (caps.matvec_rows, lavapipe's 16) stay; caps.batch_rows sets them, within the workgroup."""
    from vkdecode.lowering.caps import KernelCaps

    gpu = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16)
    assert [batch_rows(8, xr, gpu, 64) for xr in (1, 2, 4, 8)] == [8] + [
        min(8, XR_ACC // x) for x in (2, 4, 8)
    ]
    assert [batch_rows(8, xr, replace(gpu, batch_acc=16), 64) for xr in (2, 4, 8)] == [8, 4, 2]
    assert batch_rows(2, 8, replace(gpu, batch_acc=8), 64) == 1
    assert batch_rows(16, 8, replace(gpu, matvec_rows=16), 64) == 16
    assert [batch_rows(4, 8, replace(gpu, batch_rows=r), 32) for r in (8, 16, 64)] == [8, 16, 32]
    assert batch_rows(4, 8, replace(gpu, batch_rows=8), 224) == 6  # 49152 bytes of shared memory


LLAMA8B = [  # (dtype, out, in): Q4_K_M's q/o, k, v, gate/up, downs, head
    ("q4_k", 4096, 4096),
    ("q4_k", 1024, 4096),
    ("q6_k", 1024, 4096),
    ("q4_k", 14336, 4096),
    ("q4_k", 4096, 14336),
    ("q6_k", 4096, 14336),
    ("q6_k", 128256, 4096),
]


@pytest.mark.parametrize("xr", [2, 4, 8])
def test_llama8b_batch_calls_on_a_gpu(xr):
    """No GPU: a batched step's matmuls of Llama-3.1-8B Q4_K_M with an H100's caps (automatic kwide,
    accelerated integer dot products) take the one-row step's split wide units and workgroup size,
    rows per workgroup within XR_ACC accumulators."""
    from vkdecode.lowering.caps import KernelCaps

    caps = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, integer_dot=True, integer_dot_fast=True)
    for dtype, out, n_in in LLAMA8B:
        (one,) = op_calls(_case(dtype, 1, out, n_in, lazy=True)[0], 0, caps)
        planes, call = op_calls(_case(dtype, xr, out, n_in, lazy=True)[0], 0, caps)
        d = dict(call.defines)
        assert (
            {"WVEC", "KQ_IDOT", "KW_XPLANES"} <= d.keys() and "KW_JOINT" not in d and d["MV_XROWS"] == str(xr)
        )
        assert call.spec[0] == one.spec[0] and call.spec[3] == min(one.spec[3], XR_ACC // xr)
        # x's planes: written by xplanes.comp (one lane a group of 16), read at binding 4
        assert planes.shader == "xplanes" and planes.spec[1:] == (n_in, xr)
        assert planes.bindings[1] == call.bindings[4] and call.writes == (3,)
        assert planes.groups[0] * planes.spec[0] >= xr * n_in // 16

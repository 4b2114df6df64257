"""Prompt-chunk matmuls (vkdecode/lowering/matmul_rows.py, attr rows=T) against the float64
reference: the tiled, narrow and wide kernels for every weight dtype over shapes that straddle
their tiles (64-row / 16-wide / BN), and the shape each device's caps choose.
"""

from dataclasses import replace

import numpy as np
import pytest

from tests.lowering.kernel_harness import caps_of, nmse, one_op, run_and_reference
from vkdecode.lowering.ops import op_calls
from vkdecode.quant import quantize

DTYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "mxfp4")  # the ones with a unit decode
LIMIT = 1e-8  # same weights both sides: f32 rounding only (as test_kernels_matmul.py)
# (rows T, out, in): T across the BN sizes (4..64) and odd, out around the 64-row tile, in around 16
SHAPES = [(1, 33, 32), (3, 64, 64), (5, 65, 96), (8, 1, 32), (17, 130, 64), (64, 63, 160), (70, 96, 32)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,out,n_in", SHAPES, ids=[f"T{t}-{o}x{i}" for t, o, i in SHAPES])
def test_matmul_rows(device, dtype, rows, out, n_in):
    rng = np.random.default_rng(rows * 1000 + out * 7 + n_in)
    w = quantize((rng.standard_normal((out, n_in)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(rows * n_in).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((out, n_in), dtype, "weight"), "x": ((rows * n_in,), "f32", "activation")},
        {"y": ((rows * out,), "f32", "output")},
        rows=rows,
    )
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps_of(device))
    err = nmse(got["y"], want["y"])
    assert err <= LIMIT, f"matmul rows={rows} {dtype} [{out}, {n_in}]: nmse {err:.3g}"


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("rows,out,n_in", [(5, 40, 48), (9, 70, 20)])
def test_matmul_rows_element_path(device, dtype, rows, out, n_in):
    """In-dims that are not whole 32-wide tiles decode element by element (dequant_elem)."""
    rng = np.random.default_rng(rows + out + n_in)
    w = quantize((rng.standard_normal((out, n_in)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(rows * n_in).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((out, n_in), dtype, "weight"), "x": ((rows * n_in,), "f32", "activation")},
        {"y": ((rows * out,), "f32", "output")},
        rows=rows,
    )
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps_of(device))
    assert nmse(got["y"], want["y"]) <= LIMIT


def test_matmul_rows_split_weight(device):
    """A weight bound in row ranges (beyond maxStorageBufferRange) writes each range's columns."""
    rng = np.random.default_rng(1)
    w = quantize((rng.standard_normal((300, 64)) * 0.1).astype(np.float32), "q8_0")
    x = rng.standard_normal(5 * 64).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((300, 64), "q8_0", "weight"), "x": ((5 * 64,), "f32", "activation")},
        {"y": ((5 * 300,), "f32", "output")},
        rows=5,
    )
    caps = replace(caps_of(device), max_storage_range=64 * 256, min_align=16)
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps)
    assert nmse(got["y"], want["y"]) <= LIMIT


NARROW_SHAPES = [(2, 33, 32), (3, 64, 64), (5, 65, 96), (8, 1, 32), (16, 70, 64), (2, 300, 160)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,out,n_in", NARROW_SHAPES, ids=[f"T{t}-{o}x{i}" for t, o, i in NARROW_SHAPES])
def test_matmul_rows_narrow(device, dtype, rows, out, n_in):
    """The GPU narrow-chunk kernel (matmul_rows_narrow, forced here: lavapipe keeps the tiled one)
    over every BN (4/8/16 -> 16/8/4 rows per workgroup) and row counts off its row groups."""
    rng = np.random.default_rng(rows * 100 + out + n_in)
    w = quantize((rng.standard_normal((out, n_in)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(rows * n_in).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((out, n_in), dtype, "weight"), "x": ((rows * n_in,), "f32", "activation")},
        {"y": ((rows * out,), "f32", "output")},
        rows=rows,
    )
    caps = caps_of(device, matmul_narrow=16, matmul_coop=-1)
    assert [c.shader for c in op_calls(p, 0, caps)] == ["matmul_rows_narrow"]
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps)
    err = nmse(got["y"], want["y"])
    assert err <= LIMIT, f"narrow matmul rows={rows} {dtype} [{out}, {n_in}]: nmse {err:.3g}"


@pytest.mark.parametrize("dtype", ["q4_1", "q4_k", "f16"])
@pytest.mark.parametrize("lanes", [-1, 0, 8, 64])
def test_matmul_rows_narrow_lanes(device, dtype, lanes):
    """Every lanes-per-row setting (the tile width, auto, fewer and more than the row's 18 units)
    on a SmolLM2-wide row, 9 chunk rows; the choice itself."""
    from vkdecode.lowering.matmul_rows import narrow_shape

    rng = np.random.default_rng(11)
    w = quantize((rng.standard_normal((70, 768)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(9 * 768).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((70, 768), dtype, "weight"), "x": ((9 * 768,), "f32", "activation")},
        {"y": ((9 * 70,), "f32", "output")},
        rows=9,
    )
    caps = caps_of(device, matmul_narrow=16, narrow_lanes=lanes, matmul_coop=-1)
    assert [c.shader for c in op_calls(p, 0, caps)] == ["matmul_rows_narrow"]
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps)
    assert nmse(got["y"], want["y"]) <= LIMIT
    gpu = replace(caps_of(device), max_invocations=1024)
    assert narrow_shape(gpu, 16, 576, True) == (4, 32)  # 18 units: one pass of 32 lanes
    assert narrow_shape(gpu, 16, 256, True) == (4, 16)  # 8 units: the tile width is the floor
    assert narrow_shape(gpu, 4, 576, True) == (8, 32)  # 16 rows' worth would pass 256 invocations
    assert narrow_shape(gpu, 4, 20, False) == (8, 32)  # element path: 20 elements
    assert narrow_shape(replace(gpu, narrow_lanes=-1), 8, 576, True) == (8, 8)
    assert narrow_shape(replace(gpu, narrow_lanes=64, max_invocations=128), 16, 576, True) == (2, 64)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_matmul_rows_narrow_element_path(device, dtype):
    """The narrow kernel's element-at-a-time path (in-dim not a whole 32-wide tile)."""
    rng = np.random.default_rng(7)
    w = quantize((rng.standard_normal((70, 20)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(9 * 20).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((70, 20), dtype, "weight"), "x": ((9 * 20,), "f32", "activation")},
        {"y": ((9 * 70,), "f32", "output")},
        rows=9,
    )
    got, want = run_and_reference(
        device, p, {"w": w, "x": x}, caps_of(device, matmul_narrow=16, matmul_coop=-1)
    )
    assert nmse(got["y"], want["y"]) <= LIMIT


def test_matmul_rows_narrow_choice(device):
    """lavapipe keeps the tiled kernel; a GPU takes the narrow one up to 16 rows, tiled beyond."""

    def kernel(rows, **over):
        p = one_op(
            "matmul",
            {"w": ((64, 32), "f16", "weight"), "x": ((rows * 32,), "f32", "activation")},
            {"y": ((rows * 64,), "f32", "output")},
            rows=rows,
        )
        # the tensor cores (where the device has them) take chunks from 16 rows: test_coop.py
        return op_calls(p, 0, replace(caps_of(device), matmul_coop=-1, **over))[0].shader

    assert kernel(8) == (
        "matmul_rows" if getattr(device.info, "device_type", "") == "cpu" else "matmul_rows_narrow"
    )
    assert kernel(8, matmul_narrow=0) == kernel(16, matmul_narrow=0) == "matmul_rows_narrow"
    # the tiled kernel past 16 rows or with the narrow one off (a GPU's wide kernel kept off here)
    assert (
        kernel(17, matmul_narrow=0, matmul_wide=-1)
        == kernel(8, matmul_narrow=-1, matmul_wide=-1)
        == "matmul_rows"
    )


ALL_DTYPES = DTYPES + ("q5_1", "iq4_nl", "q4_k", "q5_k", "q6_k", "q2_k", "q3_k")
# (rows T, out, in, tile, k splits; a 1-row chunk is the decode matvec): T straddles the 16-row thread grid and the 64/128-row tiles,
# out the 64/128 weight rows, in the 32-wide k step (40, 48: 4-element quads; 42: element by
# element); every tile, with and
# without a split over k (3 splits of 5 k tiles: uneven)
WIDE_SHAPES = [
    (2, 33, 32, "4x4", 1),
    (3, 64, 64, "8x4", 2),
    (17, 65, 96, "4x8", 1),
    (63, 130, 64, "8x8", 1),
    (64, 129, 160, "4x4", 3),
    (65, 63, 48, "8x4", 1),
    (130, 70, 40, "8x8", 2),
    (5, 70, 42, "4x4", 2),
]
K_SHAPES = [(3, 65, 256, "8x4", 1), (65, 33, 512, "4x8", 2), (130, 129, 256, "4x4", 1)]


def _wide_case(device, dtype, rows, out, n_in, tile, splits):
    rng = np.random.default_rng(rows * 1000 + out * 7 + n_in)
    w = quantize((rng.standard_normal((out, n_in)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(rows * n_in).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((out, n_in), dtype, "weight"), "x": ((rows * n_in,), "f32", "activation")},
        {"y": ((rows * out,), "f32", "output")},
        rows=rows,
    )
    # the wide kernel forced: off a GPU's narrow (<= 16 rows) and tensor-core (>= 64 rows) choices
    caps = caps_of(
        device, matmul_wide=1, matmul_tile=tile, matmul_splitk=splits, matmul_narrow=-1, matmul_coop=-1
    )
    calls = op_calls(p, 0, caps)
    assert [c.shader for c in calls] == ["matmul_rows_wide"] + (["matmul_rows_splitk"] if splits > 1 else [])
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps)
    err = nmse(got["y"], want["y"])
    assert err <= LIMIT, f"wide matmul rows={rows} {dtype} [{out}, {n_in}] {tile}/{splits}: nmse {err:.3g}"


# quant rows are whole 32-element blocks: in-dims off 32 only for f32 / f16
WIDE_CASES = [(dt,) + s for dt in DTYPES for s in WIDE_SHAPES if s[2] % 32 == 0 or dt in ("f32", "f16")]


@pytest.mark.parametrize(
    "dtype,rows,out,n_in,tile,splits",
    WIDE_CASES,
    ids=[f"{d}-T{t}-{o}x{i}-{m}-s{s}" for d, t, o, i, m, s in WIDE_CASES],
)
def test_matmul_rows_wide(device, dtype, rows, out, n_in, tile, splits):
    """The register-blocked wide-chunk kernel (forced from 2 rows; lavapipe keeps the tiled one)."""
    _wide_case(device, dtype, rows, out, n_in, tile, splits)


@pytest.mark.parametrize("dtype", ALL_DTYPES[len(DTYPES) :])
@pytest.mark.parametrize(
    "rows,out,n_in,tile,splits", K_SHAPES, ids=[f"T{t}-{o}x{i}-{m}-s{s}" for t, o, i, m, s in K_SHAPES]
)
def test_matmul_rows_wide_element_dtypes(device, dtype, rows, out, n_in, tile, splits):
    """Dtypes without a unit decode (K-quants, q5_1, iq4_nl) through dequant_elem in the loader."""
    _wide_case(device, dtype, rows, out, n_in, tile, splits)


def test_matmul_rows_wide_split_weight(device):
    """A row-split weight: each range's wide call (and its split-k sum) writes its own columns."""
    rng = np.random.default_rng(2)
    w = quantize((rng.standard_normal((300, 64)) * 0.1).astype(np.float32), "q8_0")
    x = rng.standard_normal(20 * 64).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((300, 64), "q8_0", "weight"), "x": ((20 * 64,), "f32", "activation")},
        {"y": ((20 * 300,), "f32", "output")},
        rows=20,
    )
    for splits in (1, 2):
        caps = replace(
            caps_of(device, matmul_wide=1, matmul_splitk=splits, matmul_narrow=-1, matmul_coop=-1),
            max_storage_range=64 * 256,
            min_align=16,
        )
        assert len(op_calls(p, 0, caps)) == 2 * splits
        got, want = run_and_reference(device, p, {"w": w, "x": x}, caps)
        assert nmse(got["y"], want["y"]) <= LIMIT


def test_matmul_rows_wide_choice(device):
    """GPU caps: the narrow kernel up to 16 rows, the wide one from 17; the auto tile is the largest
    whose grid reaches matmul_groups, else 4x4 split over k; lavapipe never takes it by default."""
    from vkdecode.lowering.matmul_rows import wide_shape

    gpu = replace(caps_of(device), matmul_wide=0, matmul_narrow=0, max_shared=49152, max_invocations=1024)
    assert wide_shape(gpu, 1024, 16, 1024) is None
    assert wide_shape(gpu, 8192, 512, 1024) == (8, 4, 1)  # 8x8: 64 x 4 = 256 < 264; 8x4: 512
    assert wide_shape(replace(gpu, matmul_groups=32), 1024, 512, 1024) == (8, 8, 1)
    assert wide_shape(gpu, 1024, 512, 1024) == (4, 4, 3)  # 16 x 8 = 128 groups -> 3 splits
    assert wide_shape(gpu, 576, 64, 64) == (4, 4, 2)  # only 2 k tiles to split
    assert wide_shape(gpu, 3072, 32, 1024) == (4, 4, 6)  # 48 groups (tiles over 64 rows skipped)
    assert wide_shape(replace(gpu, matmul_wide=-1), 3072, 512, 1024) is None
    if getattr(device.info, "device_type", "") == "cpu":
        assert wide_shape(caps_of(device), 3072, 512, 1024) is None

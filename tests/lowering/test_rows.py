"""Prompt-chunk kernels (vkdecode/kernels_rows.py, attr rows=T) against the float64 reference:
the tiled matmul for every weight dtype over shapes that straddle its 64-row / 16-wide / BN tiles,
the block causal attention at several chunk positions, rope / kv_write / embed / bias add / argmax
over rows.
"""

from dataclasses import replace

import numpy as np
import pytest

from tests.lowering.kernel_harness import caps_of, nmse, one_op, run_and_reference, step
from vkdecode.lowering.ops import op_calls
from vkdecode.quant import quantize

DTYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0")
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
    caps = caps_of(device, matmul_narrow=16)
    assert [c.shader for c in op_calls(p, 0, caps)] == ["matmul_rows_narrow"]
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps)
    err = nmse(got["y"], want["y"])
    assert err <= LIMIT, f"narrow matmul rows={rows} {dtype} [{out}, {n_in}]: nmse {err:.3g}"


@pytest.mark.parametrize("dtype", ["q4_1", "q4_k", "f16"])
@pytest.mark.parametrize("lanes", [-1, 0, 8, 64])
def test_matmul_rows_narrow_lanes(device, dtype, lanes):
    """Every lanes-per-row setting (the tile width, auto, fewer and more than the row's 18 units)
    on a SmolLM2-wide row, 9 chunk rows; the choice itself."""
    from vkdecode.lowering.rows import narrow_shape

    rng = np.random.default_rng(11)
    w = quantize((rng.standard_normal((70, 768)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal(9 * 768).astype(np.float32)
    p = one_op(
        "matmul",
        {"w": ((70, 768), dtype, "weight"), "x": ((9 * 768,), "f32", "activation")},
        {"y": ((9 * 70,), "f32", "output")},
        rows=9,
    )
    caps = caps_of(device, matmul_narrow=16, narrow_lanes=lanes)
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
    got, want = run_and_reference(device, p, {"w": w, "x": x}, caps_of(device, matmul_narrow=16))
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
        return op_calls(p, 0, replace(caps_of(device), **over))[0].shader

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
    from vkdecode.lowering.rows import wide_shape

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


HEADS = [(4, 2, 16), (3, 1, 6), (2, 2, 128), (9, 3, 64)]


def _attention_case(device, h, kvh, d, rows, pos0, caps, window=0, kv="f32"):
    ctx = 128
    rng = np.random.default_rng(h * 100 + rows + pos0)
    kc = rng.standard_normal((ctx, kvh * d)).astype(np.float32)
    vc = rng.standard_normal((ctx, kvh * d)).astype(np.float32)
    kc[pos0 + rows :] = vc[pos0 + rows :] = 1e4  # past the last row's position: must not be read
    if window:  # before the first row's window: neither
        kc[: max(0, pos0 + 1 - window)] = vc[: max(0, pos0 + 1 - window)] = 1e4
    if kv == "f16":  # the reference reads the very halves the GPU holds
        kc, vc = (c.astype(np.float16).astype(np.float32) for c in (kc, vc))
    q = rng.standard_normal(rows * h * d).astype(np.float32)
    p = one_op(
        "attention",
        {
            "q": ((rows * h * d,), "f32", "activation"),
            "kc": ((ctx, kvh * d), kv, "state"),
            "vc": ((ctx, kvh * d), kv, "state"),
            "step": ((8,), "u32", "step"),
        },
        {"o": ((rows * h * d,), "f32", "output")},
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=d,
        scale=d**-0.5,
        rows=rows,
        **({"window": window} if window else {}),
    )
    got, want = run_and_reference(device, p, {"q": q, "kc": kc, "vc": vc, "step": step(0, pos0)}, caps)
    return op_calls(p, 0, caps)[0].shader, nmse(got["o"], want["o"])


@pytest.mark.parametrize("h,kvh,d", HEADS, ids=[f"h{h}kv{k}d{d}" for h, k, d in HEADS])
@pytest.mark.parametrize("rows,pos0", [(1, 0), (3, 0), (8, 5), (16, 100), (5, 123), (17, 40), (65, 0)])
@pytest.mark.parametrize("path", ["sg", "smem", "gqa"])
def test_attention_rows(device, h, kvh, d, rows, pos0, path):
    """The per-row kernel (subgroup or shared-memory reductions) and the kv-head one (auto rows)."""
    # gqa from 2 rows (a GPU's own choice is the per-row kernel under 17), never the tensor cores
    caps = caps_of(device, attn_rows_q=0 if path == "gqa" else -1, attn_gqa_rows=2, attn_coop=-1)
    if path == "sg" and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    caps = replace(caps, subgroup_arithmetic=(path == "sg"))
    shader, err = _attention_case(device, h, kvh, d, rows, pos0, caps)
    assert shader == (
        "attention" if rows == 1 else "attention_rows_gqa" if path == "gqa" else "attention_rows"
    )
    assert err <= 1e-9


GQA_CASES = [
    (9, 3, 64, 33, 7, 1, 0, "f32"),
    (9, 3, 64, 33, 7, 4, 0, "f16"),
    (16, 8, 128, 40, 60, 8, 0, "f16"),
    (4, 2, 16, 20, 90, 2, 13, "f32"),
    (4, 1, 32, 17, 3, 16, 5, "f16"),
    (3, 1, 6, 9, 30, 3, 4, "f32"),
]


@pytest.mark.parametrize(
    "h,kvh,d,rows,pos0,bq,window,kv",
    GQA_CASES,
    ids=[f"h{h}kv{k}d{d}-T{t}-pos{p}-bq{b}-w{w}-{kv}" for h, k, d, t, p, b, w, kv in GQA_CASES],
)
def test_attention_rows_gqa(device, h, kvh, d, rows, pos0, bq, window, kv):
    """attention_rows_gqa over row blocks that do not divide the chunk, sliding windows shorter than
    the chunk (rows whose window starts inside the block's first key tile) and f16 caches."""
    shader, err = _attention_case(
        device, h, kvh, d, rows, pos0, caps_of(device, attn_rows_q=bq, attn_coop=-1), window, kv
    )
    assert shader == "attention_rows_gqa"
    assert err <= 1e-9, f"nmse {err:.3g}"


def test_attention_rows_gqa_choice(device):
    """Rows per workgroup: 16 (fewer for narrower chunks), halved until the query vectors fit the
    shared memory and the workgroup; the per-row kernel where even one row does not."""
    from vkdecode.lowering.rows import gqa_rows

    caps = replace(caps_of(device), attn_rows_q=0, attn_gqa_rows=2, max_shared=49152, max_invocations=1024)
    assert gqa_rows(caps, 2, 128, 512) == 16 and gqa_rows(caps, 3, 64, 512) == 16
    assert gqa_rows(caps, 2, 128, 5) == 5  # a narrow chunk: its own rows, no padding vectors
    assert gqa_rows(replace(caps, max_shared=32768), 2, 128, 512) == 8
    assert gqa_rows(caps, 33, 64, 512) == 0  # 33 vectors: a 32-invocation workgroup
    assert gqa_rows(caps, 24, 64, 512) == 4  # 16 rows: 384 vectors > 256; 8: 83 KB of tiles
    assert gqa_rows(replace(caps, attn_rows_q=-1), 2, 128, 512) == 0


@pytest.mark.parametrize("layout", ["neox", "pairs"])
def test_rope_rows(device, layout):
    rows, h, d = 7, 3, 16
    x = np.random.default_rng(2).standard_normal(rows * h * d).astype(np.float32)
    from vkdecode.quant import PackedWeight

    freqs = (10000.0 ** (-np.arange(0, d, 2) / d)).astype(np.float32)
    p = one_op(
        "rope",
        {
            "x": ((rows * h * d,), "f32", "activation"),
            "step": ((8,), "u32", "step"),
            "f": ((d // 2,), "f32", "weight"),
        },
        {"y": ((rows * h * d,), "f32", "output")},
        n_heads=h,
        head_dim=d,
        layout=layout,
        rows=rows,
    )
    env = {"x": x, "step": step(0, 40), "f": PackedWeight("f32", (d // 2,), {"data": freqs})}
    got, want = run_and_reference(device, p, env, caps_of(device))
    assert nmse(got["y"], want["y"]) <= 1e-9


def test_kv_write_rows_touches_only_its_rows(device):
    rows, row, ctx, pos0 = 5, 24, 16, 9
    rng = np.random.default_rng(3)
    k, v = (rng.standard_normal(rows * row).astype(np.float32) for _ in range(2))
    old_k, old_v = (rng.standard_normal((ctx, row)).astype(np.float32) for _ in range(2))
    p = one_op(
        "kv_write",
        {
            "k": ((rows * row,), "f32", "activation"),
            "v": ((rows * row,), "f32", "activation"),
            "step": ((8,), "u32", "step"),
        },
        {"kc": ((ctx, row), "f32", "state"), "vc": ((ctx, row), "f32", "state")},
        rows=rows,
    )
    env = {"k": k, "v": v, "step": step(0, pos0), "kc": old_k.copy(), "vc": old_v.copy()}
    got, want = run_and_reference(device, p, env, caps_of(device))
    np.testing.assert_array_equal(got["kc"], want["kc"])
    np.testing.assert_array_equal(got["vc"][:pos0], old_v[:pos0])  # rows before: kept
    np.testing.assert_array_equal(got["vc"][pos0 + rows :], old_v[pos0 + rows :])  # after: kept


@pytest.mark.parametrize("dtype", DTYPES)
def test_embed_rows(device, dtype):
    rows, vocab, dim = 6, 50, 64
    rng = np.random.default_rng(4)
    t = quantize(rng.standard_normal((vocab, dim)).astype(np.float32), dtype)
    ids = np.array([3, 49, 0, 3, 17, 8], np.uint32)
    p = one_op(
        "embed",
        {"t": ((vocab, dim), dtype, "weight"), "ids": ((rows,), "u32", "step")},
        {"y": ((rows * dim,), "f32", "output")},
        rows=rows,
    )
    got, want = run_and_reference(device, p, {"t": t, "ids": ids}, caps_of(device))
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)


def test_add_bias_rows_and_argmax_rows(device):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(4 * 40).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    p = one_op(
        "add",
        {"a": ((160,), "f32", "activation"), "b": ((1, 40), "f32", "weight")},
        {"c": ((160,), "f32", "output")},
    )
    got, want = run_and_reference(device, p, {"a": a, "b": quantize(b[None, :], "f32")}, caps_of(device))
    np.testing.assert_allclose(got["c"], want["c"], rtol=1e-6)
    logits = rng.standard_normal(3 * 1000).astype(np.float32)
    logits[1000 + 7] = logits[1000 + 900] = 50.0  # a tie: the first index wins
    p = one_op("argmax", {"l": ((3000,), "f32", "activation")}, {"t": ((3,), "u32", "output")}, rows=3)
    got, want = run_and_reference(device, p, {"l": logits}, caps_of(device))
    np.testing.assert_array_equal(got["t"], want["t"])
    assert got["t"][1] == 7


def test_gqa_attention_choice_by_width(device):
    """GPU caps keep chunks under 17 rows on the per-row attention (a verify step's few kv-head
    workgroups starved an H100); CPU caps take the kv-head kernel from 2 rows; attn_rows_q forces."""
    from vkdecode.lowering.rows import gqa_rows

    gpu = replace(caps_of(device), attn_gqa_rows=0, attn_rows_q=0, max_shared=49152, max_invocations=1024)
    assert gqa_rows(gpu, 3, 64, 9) == 0 and gqa_rows(gpu, 3, 64, 16) == 0
    assert gqa_rows(gpu, 3, 64, 17) > 0
    assert gqa_rows(replace(gpu, attn_rows_q=4), 3, 64, 9) == 4
    assert gqa_rows(replace(gpu, attn_gqa_rows=2), 3, 64, 9) > 0
    if getattr(device.info, "device_type", "") == "cpu":
        assert caps_of(device).attn_gqa_rows == 2

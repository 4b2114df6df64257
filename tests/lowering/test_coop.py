"""The tensor-core chunk kernels (shaders/*_coop.comp via vkdecode/lowering/coop.py): their shape
choice everywhere, and their results against the float64 reference where the device has the coop
path (vk/coopmat.py: VK_KHR_cooperative_matrix with a 16x16x16 f16 shape, 32-lane subgroups, and
a glslang 13+; lavapipe has none, so those cases skip here and run on the H100:
`python -m pytest tests/lowering -k coop` there, see bench/gpu_session.sh coop).

Tolerance: the kernel rounds weights and activations to f16 and sums in f32: each product is off
by up to ~2^-10 relative, so nmse against the reference stays near 1e-7; LIMIT leaves 10x room and
still fails any indexing error (a wrong element costs nmse ~1e-2).
"""

from dataclasses import replace

import numpy as np
import pytest

from tests.lowering.kernel_harness import caps_of, nmse, one_op, run_and_reference
from tests.lowering.test_ops_moe import moe_matmul_case
from vkdecode.lowering.coop import coop_shape, parse_tile
from vkdecode.lowering.ops import op_calls
from vkdecode.quant import WEIGHT_DTYPES, quantize

LIMIT = 1e-6


def gpu_caps(device, **over):
    """Caps of a device with the coop path (vk/coopmat.py chose it: the subgroup size is its concern)."""
    return replace(
        caps_of(device),
        coop_matrix=True,
        subgroup_size=32,
        subgroup_fixed=True,
        max_shared=49152,
        max_invocations=1024,
        **over,
    )


def test_mxfp4_takes_the_tiles(device):
    """mxfp4 (dequant_half.glsl decodes it to f16: quant/mxfp4.py E_KERNEL keeps its blocks within
    f16's range) lowers to the coop kernels as q8_0 does: a chunk matmul and the grouped experts."""
    gpu = gpu_caps(device)
    for dtype in ("q8_0", "mxfp4"):
        p = one_op(
            "matmul",
            {"w": ((128, 256), dtype, "weight"), "x": ((64 * 256,), "f32", "activation")},
            {"y": ((64 * 128,), "f32", "output")},
            rows=64,
        )
        p.meta["arch"] = "llama"
        assert "matmul_rows_coop" in [c.shader for c in op_calls(p, 0, replace(gpu, matmul_wide=-1))]
        p, _ = moe_matmul_case(dtype, 4, 64, 96, 256, 128)
        p.meta["arch"] = "gpt-oss"  # rows scaled: the factors bound after the groups
        calls = op_calls(p, 0, replace(gpu, moe_group=1))
        assert [c.shader for c in calls] == ["moe_group", "to_f16", "matmul_rows_coop"]
        mm = calls[-1]
        assert ("X_ROWSCALE", "1") in mm.defines and mm.bindings[-1].value == "scratch:coop.xscale"


def test_coop_shape_choice(device):
    gpu = gpu_caps(device)
    # from an in-dim of 2048: 64 x 256 (8 subgroups, 64-wide k) wherever it divides, split to 132
    assert coop_shape(gpu, "llama", 8192, 512, 4096) == (2, 4, 2, 4, 1)  # 128 x 2 = 256
    assert coop_shape(gpu, "llama", 1024, 512, 4096) == (2, 4, 2, 4, 5)  # 16 x 2 = 32: 5 splits
    assert coop_shape(gpu, "llama", 4096, 256, 4096) == (2, 4, 2, 4, 3)  # 256-row chunks too
    assert coop_shape(gpu, "llama", 4096, 128, 4096) == (2, 2, 2, 2, 2)  # 128 rows: the tiles below
    assert coop_shape(replace(gpu, coop_wide=-1), "llama", 8192, 512, 4096) == (
        2,
        2,
        2,
        4,
        1,
    )  # off: as before
    assert coop_shape(gpu, "qwen3moe", 512, 512, 2048) == (2, 4, 2, 4, 8)  # 8 x 2: at most 8 splits
    # a model with expert layers keeps the tiles before the wide one (its attention matmuls lost)
    assert coop_shape(gpu, "qwen3moe", 512, 512, 2048, experts=True) == (2, 2, 2, 2, 3)
    assert coop_shape(gpu, "qwen3moe", 2048, 512, 4096, experts=True) == (2, 2, 2, 4, 2)
    # with its staging block the row-scaled wide tile passes 48 KiB: the tiles below
    assert coop_shape(gpu, "gemma3", 2048, 512, 2048) == (2, 2, 2, 2, 1)
    # under 2048: the first tile dividing both whose grid reaches 132 workgroups, else 64 x 64 split over k
    assert coop_shape(gpu, "qwen3", 3072, 512, 1024) == (2, 2, 2, 4, 1)  # 64 x 128: 48 x 4 = 192
    assert coop_shape(gpu, "qwen3", 3072, 64, 1024) == (2, 2, 2, 2, 3)  # 64 rows: 48 x 1, 3 splits
    assert coop_shape(gpu, "qwen3", 2048, 512, 1024) == (2, 2, 2, 2, 1)  # 64 x 64: 32 x 8 = 256
    assert coop_shape(gpu, "qwen3", 1024, 512, 1024) == (2, 2, 2, 2, 2)  # 16 x 8 = 128: 2 splits
    # where 64 x 256 does not divide (384 rows): from k 4096 the preferred tile in two splits
    # before a smaller tile whole: 32 x 3 = 96 x 2
    assert coop_shape(gpu, "qwen3moe", 2048, 384, 4096) == (2, 2, 2, 4, 2)
    assert coop_shape(gpu, "qwen3moe", 2048, 384, 2048) == (2, 2, 2, 2, 1)  # k 2048: 64 x 64
    assert coop_shape(gpu, "llama", 1024, 384, 4096) == (2, 2, 2, 2, 2)  # 64 x 128 would need 3
    assert coop_shape(gpu, "qwen3", 192, 512, 576) == (2, 2, 2, 2, 6)  # 3 x 8 = 24: 6 splits
    assert coop_shape(gpu, "qwen3", 576, 64, 576) == (2, 2, 2, 2, 8)  # 9 x 1: at most 8 splits
    assert coop_shape(replace(gpu, matmul_groups=64), "qwen3", 2048, 512, 1024) == (2, 2, 2, 4, 1)
    assert coop_shape(gpu, "qwen3", 100, 512, 1024) is None  # 100 rows: no tile divides
    assert coop_shape(gpu, "qwen3", 1024, 40, 1024) is None  # not whole 16-row tiles
    narrow = gpu  # narrow tiles where no COOP_TILES entry divides the rows
    assert coop_shape(narrow, "llama", 14336, 16, 4096) == (4, 1, 1, 1, 1)  # 64 x 16: 224 x 1
    assert coop_shape(narrow, "llama", 4096, 16, 4096) == (4, 1, 1, 1, 3)  # 64 x 1: 3 splits
    assert coop_shape(narrow, "llama", 14336, 32, 4096) == (4, 2, 1, 1, 1)  # 64 x 32
    assert coop_shape(narrow, "llama", 4096, 96, 4096) == (4, 2, 1, 1, 1)  # 96 rows: 32-row tiles, 64 x 3
    assert coop_shape(narrow, "llama", 4096, 48, 4096) == (4, 1, 1, 1, 1)  # 48 rows: 16-row tiles, 64 x 3
    assert coop_shape(narrow, "llama", 4096, 64, 4096) == (2, 2, 2, 2, 3)  # 64 rows: the usual tiles
    assert coop_shape(narrow, "qwen3", 1024, 8, 1024) is None  # under 16 chunk rows
    assert coop_shape(replace(gpu, matmul_coop=64), "qwen3", 1024, 48, 1024) is None  # under matmul_coop
    assert coop_shape(gpu, "qwen3", 1024, 512, 1000) is None  # k not whole 32-wide steps
    assert coop_shape(gpu, "gemma3", 1024, 512, 1024) == (2, 2, 2, 2, 2)  # rows scaled into f16's range
    assert coop_shape(gpu, "gpt-oss", 1024, 512, 1024) == (2, 2, 2, 2, 2)  # rows scaled too (gpt_oss.py)
    # the row-scaled kernel's staging (1 KiB a subgroup) counts against shared memory
    assert coop_shape(replace(gpu, max_shared=10240), "qwen3", 1024, 512, 1024) == (2, 2, 2, 2, 2)
    assert coop_shape(replace(gpu, max_shared=10240), "gemma3", 1024, 512, 1024) is None
    assert coop_shape(replace(gpu, matmul_coop=-1), "qwen3", 1024, 512, 1024) is None
    assert coop_shape(replace(gpu, coop_matrix=False), "qwen3", 1024, 512, 1024) is None
    assert coop_shape(replace(gpu, coop_tile="2x2:2x2", matmul_splitk=1), "qwen3", 1024, 512, 1024) == (
        2,
        2,
        2,
        2,
        1,
    )
    with pytest.raises(ValueError, match="coop_tile"):
        parse_tile("4x4")
    # a 64-wide k step (caps.coop_bk): in-dims of whole 64s only, splits counted in 64s
    bk64 = replace(gpu, coop_bk=64)
    assert coop_shape(bk64, "qwen3", 1024, 512, 1024) == (2, 2, 2, 2, 2)
    assert coop_shape(bk64, "qwen3", 576, 64, 576) == (2, 2, 2, 2, 8)  # 9 k steps: 8 splits
    assert coop_shape(bk64, "qwen3", 192, 512, 96) is None  # 96: not whole 64-wide steps
    assert coop_shape(replace(bk64, max_shared=10240), "qwen3", 1024, 512, 1024) is None  # 2x the tiles
    with pytest.raises(ValueError, match="coop_bk"):
        coop_shape(replace(gpu, coop_bk=48), "qwen3", 1024, 512, 1024)
    if not caps_of(device).coop_matrix:
        assert coop_shape(caps_of(device), "qwen3", 1024, 512, 1024) is None


DTYPES = WEIGHT_DTYPES  # every weight dtype: the tile loader decodes each
# (rows T, out, in, tile, splits): every tile, uneven splits (3 of 5 k tiles), in-dims of 4-element
# quads only (K-quants: whole 256-element superblocks)
SHAPES = [
    (64, 64, 160, "2x2:2x2", 3),
    (128, 128, 256, "2x2:4x4", 1),
    (64, 256, 512, "2x2:4x2", 2),
    (256, 64, 256, "2x2:2x4", 1),
    (16, 128, 256, "4x1:2x1", 2),
    (32, 64, 512, "2x1:2x2", 1),
    (16, 128, 256, "4x1:1x1", 2),  # the narrow tiles (batched steps of 16 and 32 rows)
    (64, 64, 512, "4x2:1x1", 1),
]
CASES = [(dt,) + s for dt in DTYPES for s in SHAPES if not dt.endswith("_k") or s[2] % 256 == 0]


@pytest.mark.parametrize(
    "dtype,rows,out,n_in,tile,splits", CASES, ids=[f"{d}-T{t}-{o}x{i}-{m}-s{s}" for d, t, o, i, m, s in CASES]
)
def test_matmul_rows_coop(device, dtype, rows, out, n_in, tile, splits):
    check_coop_matmul(device, dtype, (rows, out, n_in), tile, splits)


@pytest.mark.parametrize("dtype", ["f16", "q4_k", "q6_k"])
def test_matmul_rows_coop_x_in_the_loader(device, dtype):
    """caps.coop_x16 < 0: the tile loader rounds x to f16 itself, as before lowering/half_x.py."""
    check_coop_matmul(device, dtype, (64, 256, 512), "2x2:4x2", 2, coop_x16=-1)


BK64_TILES = [((128, 64, 512), "2x2:2x4", 3), ((128, 128, 256), "4x4:2x2", 1), ((256, 64, 768), "2x4:2x4", 2)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dims,tile,splits", BK64_TILES, ids=[t for _, t, _ in BK64_TILES])
def test_matmul_rows_coop_bk64(device, dtype, dims, tile, splits):
    """caps.coop_bk 64: the 64-wide k step through every weight dtype's tile loader, uneven splits
    (3 of 8 k steps), 4- 8- and 16-subgroup tiles."""
    if dtype.endswith("_k") and dims[2] % 256:
        dims = dims[:2] + (256 * -(-dims[2] // 256),)
    check_coop_matmul(device, dtype, dims, tile, splits, coop_bk=64)


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q4_k", "q6_k", "mxfp4"])
def test_matmul_rows_coop_auto_wide(device, dtype):
    """The automatic choice from an in-dim of 2048: 64 x 256 with its 64-wide k step, split 8 ways."""
    assert coop_shape(gpu_caps(device), "llama", 64, 256, 2048) == (2, 4, 2, 4, 8)
    check_coop_matmul(device, dtype, (256, 64, 2048), "", 0)


def test_experts_keep_the_tiles_before_the_wide_one(device):
    """A chunk matmul of a model with expert layers (matmul_rows.has_experts) lowers to the tiles
    before the wide one; the same matmul without them takes 64 x 256. Lowering only: no GPU."""
    p = one_op(
        "matmul",
        {"w": ((512, 2048), "f16", "weight"), "x": ((512 * 2048,), "f32", "activation")},
        {"y": ((512 * 512,), "f32", "output")},
        rows=512,
    )
    p.meta["arch"] = "qwen3moe"

    def groups():
        return next(c.groups for c in op_calls(p, 0, gpu_caps(device)) if c.shader == "matmul_rows_coop")

    assert groups() == (8, 2, 8)  # 64 x 256: 512 / 64 weight-row tiles x 512 / 256, 8 splits
    p.op("moe_matmul", ["w", "x"], ["y"])  # only its kind matters here
    assert groups() == (8, 8, 3)  # 64 x 64: 8 x 8 tiles, 3 splits


@pytest.mark.parametrize("dtype,splits,coop_x16", [("f16", 1, 0), ("q4_k", 2, 0), ("q6_k", 1, -1)])
def test_matmul_rows_coop_row_scaled(device, dtype, splits, coop_x16):
    """Gemma 3 (coop_row_scaled): rows up to 1e9, past f16's 65504, scaled into its range by
    to_f16 ROW_SCALE (whatever coop_x16 says) and back in the store, each row as exact as a small one."""
    magnitude = np.array([1e9, 1.0, 4e4, 1e-3, 3e5, 20.0, 1e6, 0.1] * 8, np.float32)
    check_coop_matmul(
        device, dtype, (64, 128, 512), "2x2:2x2", splits, "gemma3", magnitude, coop_x16=coop_x16
    )
    check_coop_matmul(device, dtype, (64, 128, 512), "2x2:2x2", splits, "gemma3", magnitude, coop_bk=64)


def check_coop_matmul(device, dtype, dims, tile, splits, arch="llama", row_magnitude=None, **knobs):
    """row_magnitude: x's rows multiplied by these (held to the LIMIT each, not as a whole)."""
    caps = replace(caps_of(device), **knobs)
    if not caps.coop_matrix:
        pytest.skip(f"no coop path: {device.info.features.get('coop_reason')} (runs on the H100)")
    rows, out, n_in = dims
    rng = np.random.default_rng(rows * 1000 + out * 7 + n_in)
    w = quantize((rng.standard_normal((out, n_in)) * 0.1).astype(np.float32), dtype)
    x = rng.standard_normal((rows, n_in)).astype(np.float32)
    if row_magnitude is not None:
        x *= row_magnitude[:, None]
    p = one_op(
        "matmul",
        {"w": ((out, n_in), dtype, "weight"), "x": ((rows * n_in,), "f32", "activation")},
        {"y": ((rows * out,), "f32", "output")},
        rows=rows,
    )
    p.meta["arch"] = arch
    caps = replace(caps, coop_tile=tile, matmul_splitk=splits, matmul_coop=16)
    calls = op_calls(p, 0, caps)
    splits = splits or next(c.groups[2] for c in calls if c.shader == "matmul_rows_coop")
    # x rounded once (lowering/half_x.py): always where rows are scaled
    half = ["to_f16"] if caps.coop_x16 >= 0 or row_magnitude is not None else []
    assert [c.shader for c in calls] == half + ["matmul_rows_coop"] + (
        ["matmul_rows_splitk"] if splits > 1 else []
    )
    got, want = run_and_reference(device, p, {"w": w, "x": x.ravel()}, caps)
    g, wn = got["y"].reshape(rows, out), want["y"].reshape(rows, out)
    err = max(nmse(g[t], wn[t]) for t in range(rows))
    assert err <= LIMIT, (
        f"coop matmul rows={rows} {dtype} [{out}, {n_in}] {tile}/{splits}: worst row nmse {err:.3g}"
    )


# (dtype, experts, rows per expert, in-dim, slots, x rows): gate/up (k slots share an x row) and
# down (a slot per x row), experts busy enough for several tiles
MOE_CASES = [
    ("f16", 8, 64, 64, 70, 35),
    ("q8_0", 4, 128, 96, 256, 256),
    ("q4_k", 16, 64, 256, 512, 64),
    ("q6_k", 3, 192, 256, 40, 5),
    ("mxfp4", 8, 64, 128, 96, 48),
]


@pytest.mark.parametrize("bk", [0, 64])
@pytest.mark.parametrize("dtype,e,m,n_in,slots,xrows", MOE_CASES, ids=[c[0] for c in MOE_CASES])
def test_moe_matmul_rows_coop(device, dtype, e, m, n_in, slots, xrows, bk):
    """The grouped expert matmul (lowering/moe.py) on the tensor cores: moe_group, then
    matmul_rows_coop with MOE scattering each 16 x 16 block to its slots' rows; bk 64: the
    64-wide k step (caps coop_bk) where the in-dim takes it."""
    caps = caps_of(device)
    if not caps.coop_matrix:
        pytest.skip(f"no coop path: {device.info.features.get('coop_reason')} (runs on the H100)")
    if n_in % (bk or 32):
        pytest.skip(f"in-dim {n_in} is not whole {bk}-wide k steps (the f32 tiles take it: test_ops_moe)")
    p, env = moe_matmul_case(dtype, e, m, n_in, slots, xrows, scale=0.1)
    caps = replace(caps, moe_group=1, coop_bk=bk)
    assert (("BK_STEP", "64") in op_calls(p, 0, caps)[-1].defines) == (bk == 64)
    assert [c.shader for c in op_calls(p, 0, caps)] == ["moe_group", "to_f16", "matmul_rows_coop"]
    got, want = run_and_reference(device, p, env, caps)
    err = nmse(got["y"], want["y"])
    assert err <= LIMIT, f"coop moe matmul {dtype} {e}x{m}x{n_in} slots {slots}: nmse {err:.3g}"


@pytest.mark.parametrize("dtype,xdiv", [("q4_k", 4), ("mxfp4", 1)])
def test_moe_matmul_rows_coop_row_scaled(device, dtype, xdiv):
    """The grouped expert matmul with x's rows scaled into f16's range (gpt-oss, coop_row_scaled):
    rows up to 1e9 (inf in f16 without the scaling), each slot's row as exact as a small one;
    xdiv 4: four slots share an x row (gate / up), 1: a row a slot (the down)."""
    caps = caps_of(device)
    if not caps.coop_matrix:
        pytest.skip(f"no coop path: {device.info.features.get('coop_reason')} (runs on the H100)")
    slots = 128
    p, env = moe_matmul_case(dtype, 4, 64, 256, slots, slots // xdiv, scale=0.1)
    p.meta["arch"] = "gpt-oss"
    magnitude = np.array([1e9, 1.0, 4e4, 1e-3, 3e5, 20.0, 1e6, 0.1], np.float32)
    env["x"] = (env["x"].reshape(slots // xdiv, -1) * np.resize(magnitude, slots // xdiv)[:, None]).ravel()
    caps = replace(caps, moe_group=1)
    calls = op_calls(p, 0, caps)
    assert [c.shader for c in calls] == ["moe_group", "to_f16", "matmul_rows_coop"]
    assert ("X_ROWSCALE", "1") in calls[-1].defines
    got, want = run_and_reference(device, p, env, caps)
    g, wn = got["y"].reshape(slots, -1), want["y"].reshape(slots, -1)
    assert np.isfinite(g).all()
    err = max(nmse(g[s], wn[s]) for s in range(slots))
    assert err <= LIMIT, f"row-scaled coop moe matmul {dtype} xdiv {xdiv}: worst slot nmse {err:.3g}"


def test_coop_attention_choice(device):
    from vkdecode.lowering.coop import coop_attention_shape as shape
    from vkdecode.lowering.coop import coop_attention_shared

    gpu = gpu_caps(device, attn_coop=1)
    qwen3 = {"n_heads": 16, "n_kv_heads": 8, "head_dim": 128, "scale": 0.1}
    # G = 2 heads x 2 row blocks per workgroup; 64-key tiles need 61,696 bytes at head_dim 128
    assert coop_attention_shared(2, 2, 128, 64) == 61696
    assert shape(gpu, "qwen3", dict(qwen3, rows=512), True) == (2, 32)
    assert shape(gpu, "qwen3", dict(qwen3, head_dim=64, rows=512), True) == (2, 64)
    assert shape(gpu, "qwen3", dict(qwen3, rows=48), True) == (1, 64)  # 48 rows: 16-row blocks
    assert shape(gpu, "llama", dict(qwen3, n_heads=9, n_kv_heads=3, head_dim=64, rows=64), True) == (1, 64)
    # MHA: 8 row blocks aimed for, halved to keep the grid at COOP_ATTN_MIN_GROUPS workgroups
    assert shape(gpu, "llama", dict(qwen3, n_kv_heads=16, rows=64), True) == (1, 64)
    assert shape(gpu, "llama", dict(qwen3, n_kv_heads=16, rows=512), True) == (4, 32)
    assert shape(gpu, "llama", dict(qwen3, n_kv_heads=16, rows=2048), True) == (8, 32)
    # the 8B's heads (G = 4): 2 row blocks from 512 rows (128 workgroups), 1 below
    llama8b = dict(qwen3, n_heads=32, n_kv_heads=8)
    assert shape(gpu, "llama", dict(llama8b, rows=512), True) == (2, 32)
    assert shape(gpu, "llama", dict(llama8b, rows=256), True) == (1, 32)
    assert shape(gpu, "qwen3", dict(qwen3, rows=2048), True) == (4, 32)  # 256 workgroups
    assert shape(gpu, "llama", dict(qwen3, n_kv_heads=1, rows=64), True) == (1, 16)  # G = 16: 512 lanes
    assert shape(replace(gpu, max_invocations=256), "llama", dict(qwen3, n_kv_heads=1, rows=64), True) is None
    assert shape(gpu, "qwen3", dict(qwen3, rows=40), True) is None  # rows not whole 16-row blocks
    assert shape(gpu, "qwen3", dict(qwen3, rows=512), False) is None  # f32 caches
    assert shape(gpu, "qwen3", dict(qwen3, rows=512, window=64), True) == (2, 32)  # sliding windows too
    assert shape(gpu, "qwen3", dict(qwen3, rows=512, softcap=30.0), True) is None  # an attribute it lacks
    assert shape(gpu, "gemma3", dict(qwen3, rows=512), True) == (2, 32)  # a global layer (no window)
    assert shape(gpu, "gpt-oss", dict(qwen3, rows=512), True) == (2, 32)  # its sinks too
    assert shape(gpu, "qwen3", dict(qwen3, head_dim=72, rows=512), True) is None
    assert shape(replace(gpu, attn_coop=-1), "qwen3", dict(qwen3, rows=512), True) is None
    # caps.attn_subgroups: more row blocks a workgroup share each K/V tile (a smaller tile to fit)
    assert shape(replace(gpu, attn_subgroups=8), "qwen3", dict(qwen3, rows=512), True) == (4, 32)
    assert shape(replace(gpu, attn_subgroups=16), "qwen3", dict(qwen3, rows=512), True) == (8, 16)
    # caps.attn_bkv: the tile's keys forced (48 fit at head_dim 128 where 64 do not); refused if not
    assert shape(replace(gpu, attn_bkv=48), "qwen3", dict(qwen3, rows=512), True) == (2, 48)
    for bad in (64, 40):
        with pytest.raises(ValueError, match="attn_bkv"):
            shape(replace(gpu, attn_bkv=bad), "qwen3", dict(qwen3, rows=512), True)
    # 32: no tile fits the shared memory
    assert shape(replace(gpu, attn_subgroups=32), "qwen3", dict(qwen3, rows=512), True) is None
    # auto: up to COOP_ATTN_AUTO_MAX_D
    from vkdecode.lowering.coop import COOP_ATTN_AUTO_MAX_D

    auto = replace(gpu, attn_coop=0)
    assert (shape(auto, "qwen3", dict(qwen3, rows=512), True) is not None) == (COOP_ATTN_AUTO_MAX_D >= 128)
    gemma = {"n_heads": 4, "n_kv_heads": 1, "head_dim": 256, "scale": 0.0625, "rows": 512, "window": 512}
    assert (shape(auto, "gemma3", gemma, True) is not None) == (COOP_ATTN_AUTO_MAX_D >= 256)
    assert shape(auto, "qwen3", dict(qwen3, head_dim=64, rows=512), True) == (2, 64)


# (heads, kv heads, head_dim, rows, pos0, ctx, q scale): GQA groups of 2 / 3 / 4 / 1 / 8, positions
# that leave the last key tile partial, caches that end exactly at the chunk's last row, chunks of
# many tiles, and queries scaled up so that row maxima jump by more than the kernel's rescale
# threshold from tile to tile (large scores: the online rescale path runs every few tiles)
# sliding windows (the last value, 0: none): shorter than a key tile, than the chunk, Gemma 3's 512
# at its head_dim 256 (4 query heads on 1 kv head), and at positions where the window starts mid-tile
ATTN_CASES = [
    (16, 8, 128, 64, 0, 64, 1.0, 0),
    (9, 3, 64, 32, 37, 80, 1.0, 0),
    (4, 1, 64, 48, 5, 53, 1.0, 0),
    (4, 4, 16, 16, 100, 120, 1.0, 0),
    (2, 1, 128, 128, 7, 135, 1.0, 0),
    (16, 8, 128, 256, 300, 600, 1.0, 0),
    (16, 8, 128, 128, 200, 328, 12.0, 0),
    (8, 8, 64, 64, 70, 134, 12.0, 0),
    (8, 1, 32, 32, 19, 51, 6.0, 0),
    (4, 1, 256, 64, 0, 64, 1.0, 0),
    (4, 1, 256, 128, 530, 658, 1.0, 512),
    (9, 3, 64, 32, 37, 80, 1.0, 20),
    (16, 8, 128, 128, 200, 328, 12.0, 100),
    (8, 1, 32, 64, 19, 83, 6.0, 7),
]


@pytest.mark.parametrize(
    "h,kvh,d,rows,pos0,ctx,qs,window",
    ATTN_CASES,
    ids=[f"h{h}kv{k}d{d}-T{t}-pos{p}-ctx{c}-q{s:g}-w{w}" for h, k, d, t, p, c, s, w in ATTN_CASES],
)
def test_attention_rows_coop(device, h, kvh, d, rows, pos0, ctx, qs, window):
    """Causal chunk attention on the tensor cores against the float64 reference; cache rows past
    the chunk are NaN, so a masked key that still reached a product (0 x NaN) would show. With a
    window, keys before it are large (an unmasked one would dominate its row's softmax) and rows
    before any tile the chunk needs are NaN."""
    check_coop_attention(device, h, kvh, d, rows, pos0, ctx, qs, window)


# gpt-oss: sinks (head 0 at +30, which takes nearly all of its softmax, head 1 at -30), its heads
# (8 query heads a kv head, head_dim 64), with and without a window
SINK_CASES = [
    (16, 2, 64, 64, 37, 101, 1.0, 0),
    (16, 2, 64, 32, 100, 132, 1.0, 20),
    (4, 4, 16, 16, 5, 21, 6.0, 0),
]


@pytest.mark.parametrize("h,kvh,d,rows,pos0,ctx,qs,window", SINK_CASES)
def test_attention_rows_coop_sinks(device, h, kvh, d, rows, pos0, ctx, qs, window):
    """Attention sinks on the tensor cores: each head's output as exact (relative to its own size,
    head_nmse) as without them, and the sinks change the result."""
    check_coop_attention(device, h, kvh, d, rows, pos0, ctx, qs, window, sinks=True)


# forced tiles (caps.attn_bkv, attn_subgroups): 48-key tiles (three 16-key blocks, tiles that
# straddle the window's start and the chunk's end), 8 and 16 subgroups a workgroup
TILE_CASES = [
    ({"attn_bkv": 48}, (16, 8, 128, 128, 200, 328, 12.0, 0)),
    ({"attn_bkv": 48}, (9, 3, 64, 32, 37, 80, 1.0, 20)),
    ({"attn_bkv": 48}, (8, 1, 32, 64, 19, 83, 6.0, 7)),
    ({"attn_subgroups": 8}, (32, 8, 128, 64, 70, 134, 6.0, 0)),
    ({"attn_subgroups": 16, "attn_bkv": 16}, (16, 8, 128, 128, 19, 147, 1.0, 0)),
]


@pytest.mark.parametrize(
    "tuning,case", TILE_CASES, ids=[",".join(f"{k}={v}" for k, v in t.items()) for t, _ in TILE_CASES]
)
def test_attention_rows_coop_tiles(device, tuning, case):
    """The tensor-core attention with its tile forced: as exact as the automatic choice."""
    check_coop_attention(device, *case, tuning=tuning)


def check_coop_attention(device, h, kvh, d, rows, pos0, ctx, qs, window, sinks=False, tuning=None):
    from tests.lowering.kernel_harness import PackedWeight, draw_sinks, head_nmse, run_ops_reference, step

    caps = caps_of(device, attn_coop=1, **(tuning or {}))
    if not caps.coop_matrix:
        pytest.skip(f"no coop path: {device.info.features.get('coop_reason')} (runs on the H100)")
    rng = np.random.default_rng(h * 100 + rows + pos0)
    kc = rng.standard_normal((ctx, kvh * d)).astype(np.float16).astype(np.float32)
    vc = rng.standard_normal((ctx, kvh * d)).astype(np.float16).astype(np.float32)
    kc[pos0 + rows :] = vc[pos0 + rows :] = np.nan
    if window:
        lo = max(0, pos0 + 1 - window)  # the chunk's first row's first key
        kc[:lo] *= 8.0
        vc[:lo] = 1e3
        kc[: max(0, lo - 64)] = vc[: max(0, lo - 64)] = np.nan  # before the first tile (BKV <= 64)
    # q scaled: scores ~ N(0, qs^2) (the f16 rounding of q s in the kernel keeps the error relative)
    q = (qs * rng.standard_normal(rows * h * d)).astype(np.float32)
    ins = {
        "q": ((rows * h * d,), "f32", "activation"),
        "kc": ((ctx, kvh * d), "f16", "state"),
        "vc": ((ctx, kvh * d), "f16", "state"),
        "step": ((8,), "u32", "step"),
    }
    env = {"q": q, "kc": kc, "vc": vc, "step": step(0, pos0)}
    if sinks:
        ins["sinks"] = ((h,), "f32", "weight")
        env["sinks"] = PackedWeight("f32", (h,), {"data": draw_sinks(rng, h)})
    p = one_op(
        "attention",
        ins,
        {"o": ((rows * h * d,), "f32", "output")},
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=d,
        scale=d**-0.5,
        rows=rows,
        **({"window": window} if window else {}),
    )
    assert op_calls(p, 0, caps)[0].shader == "attention_rows_coop"
    got, want = run_and_reference(device, p, env, caps)
    err = head_nmse(got["o"], want["o"], h, d) if sinks else nmse(got["o"], want["o"])
    if sinks:  # the sinks matter: without them (a sink of -inf) the reference differs
        none = PackedWeight("f32", (h,), {"data": np.full(h, -np.inf, np.float32)})
        off = run_ops_reference(p, {**env, "sinks": none})
        assert head_nmse(off["o"], want["o"], h, d) > 1e3 * LIMIT
    # q x scale goes to f16 in the kernel: the scores' error grows with their size, so the limit
    # grows with the square of the q scale
    assert err <= LIMIT * max(1.0, qs) ** 2, (
        f"coop attention h{h} kv{kvh} d{d} T{rows} pos{pos0} q{qs} w{window}: nmse {err:.3g}"
    )

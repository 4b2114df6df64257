"""The matmuls of a prompt chunk (fusion/chunk.py, attr rows=T) -> kernel calls, in the shapes
KernelCaps chooses per device: matmul_rows_narrow (GPUs, up to 16 rows), matmul_rows_wide (+
matmul_rows_splitk, GPUs from 17 rows), matmul_rows_coop (tensor cores, coop.py's shapes) and the
tiled matmul_rows (lavapipe at every width; elsewhere where no other shape applies). Weights are
decoded through dequant.glsl; rows.py sends a chunk's matmul ops here.
"""

from __future__ import annotations

import struct

from fusion.ir import Op, Program
from vkdecode.lowering.calls import (
    MAX_GROUPS_X,
    Binding,
    KernelCall,
    KernelCaps,
    dtype_define,
    flat_groups,
    row_chunks,
    weight_bindings,
    wg_size,
)
from vkdecode.lowering.coop import COOP_BK, coop_bk, coop_row_scaled, coop_shape, forced_bk, tile_dims
from vkdecode.lowering.half_x import half_x
from vkdecode.quant import FLOAT_TYPES, UNIT_DTYPES

MATMUL_BM = 64  # weight rows per workgroup (shaders/matmul_rows.comp BM)
NARROW_OUTPUTS = 64  # outputs (weight rows x BN) per matmul_rows_narrow workgroup = its size


def matmul_tile_rows(rows: int) -> int:
    """BN, chunk rows per matmul tile: the chunk's width up to 64 (a power of two >= 4)."""
    bn = 4
    while bn < min(rows, 64):
        bn *= 2
    return bn


def narrow_rows(caps: KernelCaps, bn: int) -> int:
    """Weight rows per matmul_rows_narrow workgroup for a chunk of tile width bn, or 0 (tiled
    matmul_rows): a chunk no wider than caps.matmul_narrow (0: 16) on a device whose limits hold a
    64-invocation workgroup and its 64 x 65 floats of partial sums."""
    limit = 16 if caps.matmul_narrow == 0 else caps.matmul_narrow
    fits = caps.max_invocations >= NARROW_OUTPUTS and caps.max_shared >= 4 * NARROW_OUTPUTS * (
        NARROW_OUTPUTS + 1
    )
    return NARROW_OUTPUTS // bn if bn <= min(limit, 16) and fits else 0


NARROW_MAX_WG = 256


def narrow_shape(caps: KernelCaps, bn: int, n_in: int, units: bool) -> tuple[int, int]:
    """(RW weight rows, invocations per row) of a matmul_rows_narrow workgroup for a chunk of tile
    width bn: auto (caps.narrow_lanes 0) enough lanes per row to take its 32-element units (or
    elements) in one pass, 32 at most and bn at least; < 0 bn lanes (the first form). Rows: 64 / bn
    outputs' worth, fewer where the workgroup would pass NARROW_MAX_WG invocations. H100, a 9-row
    SmolLM2 Q4_1 chunk: 211 matmuls 3.83 ms with 64 invocations over all K of 4 rows, 1.76 ms with
    the tile width's 16 lanes per row, 1.41 ms with auto's 32."""
    if caps.narrow_lanes > 0:
        lanes = caps.narrow_lanes
    elif caps.narrow_lanes < 0:
        lanes = bn
    else:
        work = n_in // 32 if units else n_in
        lanes = bn
        while lanes < min(32, work):
            lanes *= 2
    lanes = max(bn, lanes)
    rw = max(1, min(NARROW_OUTPUTS // bn, min(NARROW_MAX_WG, caps.max_invocations) // lanes))
    return rw, lanes


WIDE_WG = 256  # matmul_rows_wide: 16 x 16 invocations
WIDE_BK = 32  # its k step
WIDE_TILES = ((8, 8), (8, 4), (4, 8), (4, 4))  # TM x TN micro-tiles, the most work per load first
MAX_SPLITS = 8


def wide_shared(tm: int, tn: int, pad: int) -> int:
    """Shared bytes of matmul_rows_wide's weight and activation tiles (vec4 rows + pad vec4s)."""
    return 16 * WIDE_BK * (4 * tm + 4 * tn + 2 * pad)


def wide_shape(caps: KernelCaps, n: int, rows: int, n_in: int) -> tuple[int, int, int] | None:
    """(TM, TN, k splits) of matmul_rows_wide for n weight rows x `rows` chunk rows, or None (the
    device's limits do not hold it, or caps keep this width off it). Auto: the largest tile whose
    grid reaches caps.matmul_groups workgroups (tiles wider than the chunk are skipped), else the
    smallest tile, split over k until it does (a GPU of ~132 SMs sits half idle on fewer)."""
    start = 17 if caps.matmul_wide == 0 else caps.matmul_wide
    if caps.matmul_wide < 0 or rows < start or caps.max_invocations < WIDE_WG:
        return None
    fits = [(tm, tn) for tm, tn in WIDE_TILES if wide_shared(tm, tn, 0) <= caps.max_shared]
    if caps.matmul_tile:
        tm, tn = (int(v) for v in caps.matmul_tile.split("x"))
        if (tm, tn) not in fits:
            raise ValueError(
                f"matmul_tile {caps.matmul_tile}: not one of {[f'{a}x{b}' for a, b in fits]} here"
            )
        fits = [(tm, tn)]
    fits = [f for f in fits if 16 * f[1] <= max(64, rows)] or fits[-1:]
    if not fits:
        return None
    target = caps.matmul_groups or 264

    def groups(t):
        return -(-n // (16 * t[0])) * -(-rows // (16 * t[1]))

    tile = next((t for t in fits if groups(t) >= target), fits[-1])
    splits = caps.matmul_splitk or max(1, min(MAX_SPLITS, -(-target // groups(tile))))
    return tile[0], tile[1], max(1, min(splits, -(-n_in // WIDE_BK)))


def weight_defines(dtype: str, n_in: int) -> tuple:
    defines = (dtype_define(dtype),)
    if n_in % 32 == 0 and dtype in UNIT_DTYPES:  # whole 32-wide k tiles: a unit at a time
        defines += (("UNITS", "1"),) + ((("WVEC", "1"),) if dtype in FLOAT_TYPES else ())
    return defines


def expert_bk(caps: KernelCaps) -> int:
    """The grouped expert matmul's k step: COOP_BK unless caps.coop_bk forces 64. Its 32-slot tiles
    lost at 64 by 17-20%, and on 8 subgroups (the dense tile's lesson) by 8-9% (H100,
    bench/results/nvidia-h100-80gb-hbm3/2026-12-07-owed16/mm-moe16.json)."""
    return forced_bk(caps) or COOP_BK


def expert_matmul_calls(
    w: tuple,
    ins: tuple,
    out: str,
    dims: tuple,
    group: tuple,
    coop: tuple | None,
    caps: KernelCaps,
    gate: str = "",
    row_scaled: bool = False,
) -> list[KernelCall]:
    """One expert matmul over a chunk's slots grouped by expert (lowering/moe.py): w = (bindings,
    dtype) of the whole 3-D weight, ins its x and the groups, dims (K, M rows of one expert, slots),
    group (BN slots per tile, tiles at most, x rows' divisor, where order[] starts). The tiled
    matmul_rows, or matmul_rows_coop with coop = its (SG_M, SG_N, BLK_M, BLK_N) tile. Workgroup y
    is a tile of one expert's slots; tiles past the count written on the GPU return at once.
    gate: the up matmul of a SwiGLU storing silu(gate) * its sum (GLU_SILU, lowering/moe_chunk.py).
    The coop kernel reads x through half_x (its f16 conversion first; row_scaled: x's rows scaled
    into f16's range, coop.coop_row_scaled, the factors bound after the groups and the gate)."""
    (wb, dtype), (x, groups), (n_in, m, slots) = w, ins, dims
    bn, tiles, xdiv, order = group
    defines = weight_defines(dtype, n_in) + (("MOE", "1"),) + ((("GLU_SILU", "1"),) if gate else ())
    b = wb + (Binding(x), Binding(out), Binding(groups)) + ((Binding(gate),) if gate else ())
    writes = (len(wb) + 1,)
    if coop is None:
        spec = ((MATMUL_BM // 8) * (bn // 4), n_in, m, slots, m, bn, xdiv, order)
        grid = (-(-m // MATMUL_BM), tiles, 1)
        return [
            KernelCall(
                "matmul_rows", spec, b, writes, grid, push=struct.pack("<I", 0), defines=defines, label=out
            )
        ]
    bm, _, wg = tile_dims(coop)
    if ("UNITS", "1") not in defines and n_in % 4 == 0:
        defines += (("QUADS", "1"),)
    defines += tuple((k, str(v)) for k, v in zip(("SG_M", "SG_N", "BLK_M", "BLK_N"), coop))
    bk = expert_bk(caps)
    defines += (("BK_STEP", str(bk)),) if bk != COOP_BK else ()
    xrows = slots // xdiv
    convert, xb, xdefs, after = half_x(x, xrows * n_in, caps, xrows if row_scaled else 0)
    b, defines = wb + (xb,) + b[len(wb) + 1 :] + after, defines + xdefs
    spec = (wg, n_in, m, slots, m, 1, xdiv, order)
    grid = (m // bm, tiles, 1)
    return convert + [
        KernelCall(
            "matmul_rows_coop", spec, b, writes, grid, push=struct.pack("<I", 0), defines=defines, label=out
        )
    ]


def has_experts(p: Program) -> bool:
    """Whether the program has expert layers (their chunks keep the tiles before the wide one)."""
    return any(o.kind == "moe_matmul" for o in p.ops)


def matmul_calls(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    """A chunk matmul, per row range of its weight: the coop, wide, narrow or tiled kernel."""
    w, x = op.inputs
    wv = p.values[w]
    n_out, n_in = wv.shape
    rows = int(op.attrs.get("rows", 1))
    bn = matmul_tile_rows(rows)
    wg = (MATMUL_BM // 8) * (bn // 4)  # 8 x 4 outputs per invocation
    chunks = row_chunks(wv.dtype, n_out, n_in, caps)
    defines = weight_defines(wv.dtype, n_in)
    narrow = narrow_rows(caps, bn)
    calls = []
    for r0, n in chunks:
        b = weight_bindings(w, wv.dtype, r0, None if len(chunks) == 1 else n)
        label = op.outputs[0] + (f"[{r0}:]" if len(chunks) > 1 else "")
        # tensor cores first at any width they take (coop_shape: from caps.matmul_coop rows)
        arch = str(p.meta.get("arch", ""))
        coop = coop_shape(caps, arch, n, rows, n_in, has_experts(p))
        if coop is not None:
            dims = (n_in, n, rows, n_out)
            calls += _coop_calls(
                op.outputs[0], b + (Binding(x),), coop, dims, r0, defines, label, caps, coop_row_scaled(arch)
            )
            continue
        wide = None if narrow else wide_shape(caps, n, rows, n_in)
        if wide is not None:
            calls += _wide_calls(
                op.outputs[0], b + (Binding(x),), wide, (n_in, n, rows, n_out), r0, defines, label, caps
            )
            continue
        b += (Binding(x), Binding(op.outputs[0]))
        rw, lanes = narrow_shape(caps, bn, n_in, ("UNITS", "1") in defines) if narrow else (0, 0)
        if narrow and -(-n // rw) <= MAX_GROUPS_X:
            kernel, spec = "matmul_rows_narrow", (rw * lanes, n_in, n, rows, n_out, bn, rw)
            grid = (-(-n // rw), 1, 1)
        else:
            kernel, spec = "matmul_rows", (wg, n_in, n, rows, n_out, bn)
            grid = (-(-n // MATMUL_BM), -(-rows // bn), 1)
        calls.append(
            KernelCall(
                kernel, spec, b, (len(b) - 1,), grid, push=struct.pack("<I", r0), defines=defines, label=label
            )
        )
    return calls


def _wide_calls(
    out: str, ins: tuple, wide: tuple, dims: tuple, r0: int, defines: tuple, label: str, caps: KernelCaps
) -> list[KernelCall]:
    """matmul_rows_wide into Y, or (k splits > 1) into partial sums that matmul_rows_splitk adds."""
    (tm, tn, s), (_, n, rows, _) = wide, dims
    grid = (-(-n // (16 * tm)), -(-rows // (16 * tn)), s)
    pad = int(wide_shared(tm, tn, 1) <= caps.max_shared)
    defines = defines + (("TM", str(tm)), ("TN", str(tn)), ("PAD", str(pad)))
    return _tiled_calls("matmul_rows_wide", WIDE_WG, grid, out, ins, dims, r0, defines, label, caps)


def _coop_calls(
    out: str,
    ins: tuple,
    shape: tuple,
    dims: tuple,
    r0: int,
    defines: tuple,
    label: str,
    caps: KernelCaps,
    row_scaled: bool = False,
) -> list[KernelCall]:
    """matmul_rows_coop (tensor cores) into Y, or into split-k partials like the wide kernel;
    row_scaled: x's rows scaled into f16's range first (coop.coop_row_scaled)."""
    *tile, s = shape
    tile = tuple(tile)
    bm, bn, wg = tile_dims(tile)
    grid = (dims[1] // bm, dims[2] // bn, s)
    defines = defines + tuple((k, str(v)) for k, v in zip(("SG_M", "SG_N", "BLK_M", "BLK_N"), tile))
    bk = coop_bk(caps, tile)
    defines += (("BK_STEP", str(bk)),) if bk != COOP_BK else ()
    convert, xb, xdefs, after = half_x(ins[-1].value, dims[2] * dims[0], caps, dims[2] if row_scaled else 0)
    ins, defines = ins[:-1] + (xb,), defines + xdefs
    calls = _tiled_calls("matmul_rows_coop", wg, grid, out, ins, dims, r0, defines, label, caps, after)
    return convert + calls


def _tiled_calls(
    kernel: str,
    wg: int,
    grid: tuple,
    out: str,
    ins: tuple,
    dims: tuple,
    r0: int,
    defines: tuple,
    label: str,
    caps: KernelCaps,
    after: tuple = (),
) -> list[KernelCall]:
    """A k-tiled matmul (grid z = k splits) into Y, or (splits > 1) into a scratch of partial sums
    that matmul_rows_splitk adds into Y. The scratch is one name for every matmul: the calls run
    one after another, so the largest split set is all that is ever live. after: bindings the
    kernel takes after Y's."""
    n_in, n, rows, n_out = dims
    s = grid[2]
    if ("UNITS", "1") not in defines and n_in % 4 == 0:
        defines += (("QUADS", "1"),)
    push = struct.pack("<I", r0)
    spec = (wg, n_in, n, rows, n_out, s)
    if s == 1:
        b = ins + (Binding(out),) + after
        return [KernelCall(kernel, spec, b, (len(ins),), grid, push=push, defines=defines, label=label)]
    part, nbytes = "scratch:matmul_rows.splitk", s * rows * n * 4
    b = ins + (Binding(part),) + after
    sum_wg = wg_size(caps, 256)
    return [
        KernelCall(
            kernel,
            spec,
            b,
            (len(ins),),
            grid,
            push=push,
            defines=defines + (("SPLITK", "1"),),
            scratch=((part, nbytes),),
            label=label + "[splitk]",
        ),
        KernelCall(
            "matmul_rows_splitk",
            (sum_wg, n, rows, n_out, s),
            (Binding(part), Binding(out)),
            (1,),
            flat_groups(-(-n * rows // sum_wg)),
            push=push,
            scratch=((part, nbytes),),
            label=label + "[sum]",
        ),
    ]

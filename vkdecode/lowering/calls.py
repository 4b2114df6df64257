"""What a lowering returns and the launch-shape helpers every lowering module shares: KernelCall and
Binding, workgroup sizes and grids, weight bindings and row ranges, the matvec shape and its wide
units, the split-K attention grid. Pure choice, no Vulkan; ops.py, the fused region families and
the executors all build on it, and it imports none of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.ir import Program
from vkdecode.lowering.caps import KernelCaps  # also re-exported: every lowering takes (..., caps)
from vkdecode.quant import IDOT_TYPES, K_TYPES, KSPLIT_TYPES, QUANT_TYPES, row_words

MAX_GROUPS_X = 65535  # the minimum maxComputeWorkGroupCount[0]; larger grids go 2-D


@dataclass(frozen=True)
class Binding:
    value: str  # a program value name, or a scratch name "scratch:<id>"
    part: str = "data"  # weights: "data" | "q" | "s"; others "data"
    row_start: int = 0  # weights split by rows: first row bound (byte offset = row_start * row_bytes)
    rows: int | None = None  # number of rows bound (None = all)


@dataclass(frozen=True)
class AttnGrid:
    """A split-K attention grid as its combine needs it: H heads of D, S splits, live ones
    ceil(rows / maxchunk) but at least min_s (attn_live.glsl attn_live_splits; maxchunk is the
    kernel's MAXCHUNK or, fused on GPUs, fewer: attention.live_rows), the sliding window."""

    h: int
    d: int
    s: int
    maxchunk: int
    min_s: int
    window: int

    def spec(self) -> tuple[int, ...]:
        return (self.h, self.d, self.s, self.maxchunk, self.min_s, self.window)


def live_splits(pos: int, grid: AttnGrid) -> int:
    """Splits of `grid` with rows at position pos: shaders/attn_live.glsl attn_live_splits."""
    rows = min(pos + 1, grid.window) if grid.window else pos + 1
    return min(max(-(-rows // grid.maxchunk), min(grid.min_s, grid.s)), grid.s)


@dataclass(frozen=True)
class KernelCall:
    shader: str  # stem of shaders/<shader>.comp
    spec: tuple  # specialization constants by constant_id 0..n-1
    bindings: tuple[Binding, ...]  # binding i of set 0, all storage buffers
    writes: tuple[int, ...]  # indices of bindings the kernel writes
    groups: tuple[int, int, int]
    push: bytes = b""  # constant across tokens only (e.g. a row offset of a split)
    defines: tuple[tuple[str, str], ...] = ()
    scratch: tuple[tuple[str, int], ...] = ()  # (scratch name, nbytes) this call needs allocated
    label: str = ""
    # split-K attention whose live splits vary with the position: groups[0] is its grid's S, and the
    # executor dispatches it indirectly with x = live_splits(pos, live) (executors/plan.py GridArgs)
    live: AttnGrid | None = None


def pow2_at_least(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(max(1, n))))


def wg_size(caps: KernelCaps, want: int, cap: int = 256) -> int:
    """A power-of-two workgroup size near `want`, not below the subgroup, within the device limit."""
    lim = 1 << int(math.log2(max(1, min(cap, caps.max_invocations))))
    return max(1, min(lim, max(pow2_at_least(want), min(caps.subgroup_size, lim))))


def flat_groups(n: int) -> tuple[int, int, int]:
    """n workgroups; shaders rebuild the flat index with flat_group_id() when the grid is 2-D."""
    if n <= MAX_GROUPS_X:
        return (max(1, n), 1, 1)
    y = -(-n // MAX_GROUPS_X)
    return (-(-n // y), y, 1)


# Widest rows whose wide q4_k / q6_k units split by default (kw_split). H100, Llama-3.1-8B Q4_K_M
# step profile: q/k/v 574-586 vs 613 µs, gate/up 1470 vs 1723, o 333 vs 362 split, but the 14336-wide
# downs 972-990 vs 929 (bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kwide-split/).
KW_SPLIT_MAX_IN = 4096


def kw_split(n_in: int, caps: KernelCaps, dtype: str = "") -> bool:
    """Whether wide q4_k / q6_k units of n_in-wide rows load every row's words, then x in halves
    (shaders/kwide_rows.glsl): caps.kw_split > 0 always, < 0 never, 0 up to KW_SPLIT_MAX_IN, and
    at every width where dtype takes integer dot products (kq_idot: the 14336-wide downs ran
    faster split with them than whole in floats)."""
    if caps.kw_split:
        return caps.kw_split > 0
    return n_in <= KW_SPLIT_MAX_IN or (dtype in IDOT_TYPES and kq_idot(caps, dtype))


def kq_idot(caps: KernelCaps, dtype: str = "q4_k") -> bool:
    """Whether split wide units of dtype (q4_k, q6_k) take integer dot products (dequant.glsl
    KQ_IDOT, KQ_IDOT_Q6): each half unit's x becomes 22-bit block fixed point once for all of a
    workgroup's rows, then three 4x8-bit dot products per q word and row replace the nibble
    decodes and FMAs. H100, Llama-3.1-8B Q4_K_M shape: q4_k 14336x4096 22.1 vs 24.0 µs, the whole
    step 3300 vs 3532 µs (ab_modes, ctx 1024), tokens identical; q6_k with fewer rows than the float
    kernel holds (its registers): the head 197 vs 205 µs at 64 x 4, the 14336-wide downs 461 vs 477
    at 224 x 4 (bench/results/nvidia-h100-80gb-hbm3/2026-11-25-session-h/). Automatic (caps.kq_idot
    0) where the driver says the packed dot products are accelerated (every Vulkan 1.3 device has
    them, some emulated); > 0 wherever shaderIntegerDotProduct is, < 0 never; q6_k also unless
    caps.kq_idot_q6 < 0. CPUs never split wide units (kw_split -1)."""
    if caps.kq_idot < 0 or not caps.integer_dot or (dtype == "q6_k" and caps.kq_idot_q6 < 0):
        return False
    return dtype in IDOT_TYPES and (caps.kq_idot > 0 or caps.integer_dot_fast)


def kw_balanced(units: int, caps: KernelCaps) -> bool:
    """Whether a wide K-quant matvec over `units` units a row takes units / 2 lanes (matvec_shape):
    an odd multiple of 64 units above 256 (so the lanes are whole 32-lane subgroups, not a power of
    two), under caps.kw_balance (0 and > 0: yes, < 0: never). Only with subgroup arithmetic: the
    shaders' shared-memory tree reductions need a power-of-two workgroup."""
    if (
        caps.kw_balance < 0
        or not caps.subgroup_arithmetic
        or units <= 256
        or units % 64
        or (units // 64) % 2 == 0
    ):
        return False
    return units // 2 <= caps.max_invocations and (units // 2) % max(1, caps.subgroup_size) == 0


def wvec_defines(wvec: bool, caps: KernelCaps, n_in: int, dtype: str = "") -> tuple[tuple[str, str], ...]:
    """Defines of a matvec's wide units (matvec_shape's third value) over n_in-wide rows of dtype
    ("" for mixed slots): WVEC, NIB_OLD where the device decodes K-quant nibbles the old way
    (caps.kq_inplace < 0), KW_JOINT where wide q4_k / q6_k units keep their whole x live at once
    (not kw_split), else KQ_IDOT (q4_k) and KQ_IDOT_Q6 (q6_k) where split units take integer dot
    products (kq_idot; with mixed slots the shader picks per slot)."""
    if not wvec:
        return ()
    split = kw_split(n_in, caps, dtype)
    q4 = split and kq_idot(caps, "q4_k") and dtype in ("", "q4_k")
    q6 = split and kq_idot(caps, "q6_k") and dtype in ("", "q6_k")
    return (
        (("WVEC", "1"),)
        + ((("NIB_OLD", "1"),) if caps.kq_inplace < 0 else ())
        + ((("KW_JOINT", "1"),) if not split else ())
        + ((("KQ_IDOT", "1"),) + planes_defines(caps) if q4 or q6 else ())
        + ((("KQ_IDOT_Q6", "1"),) if q6 else ())
    )


def x_planes(caps: KernelCaps) -> int:
    """Byte planes of x where split K-quant units take integer dot products (caps.kq_planes): 2,
    x rounded to 16 bits of its 16-element group's largest |x| (two dot products a q word), or 3,
    22 bits (three). H200, Llama-3.1-8B Q4_K_M: a batched step's matvecs are bound by those dot
    products from 4 rows (bench/results/nvidia-h200/2026-11-27-kq-planes/)."""
    if caps.kq_planes not in (0, 2, 3):
        raise ValueError(f"kq_planes {caps.kq_planes}: expected 2 or 3 (0: 2)")
    return caps.kq_planes or 2


def planes_defines(caps: KernelCaps) -> tuple[tuple[str, str], ...]:
    """KQ_PLANES for every kernel making or reading x planes (kw_planes.glsl's default is 2)."""
    return (("KQ_PLANES", "3"),) if x_planes(caps) == 3 else ()


def reduce_defines(caps: KernelCaps) -> tuple[tuple[str, str], ...]:
    return (("USE_SUBGROUP", "1"),) if caps.subgroup_arithmetic else ()


def weight_parts(dtype: str) -> tuple[str, ...]:
    return ("q", "s") if dtype in QUANT_TYPES else ("data",)


def row_bytes(dtype: str, n_in: int, part: str) -> int:
    """Bytes per row of one part of a weight in vkdecode/quant.py's layout."""
    if dtype in QUANT_TYPES:
        return row_words(dtype, n_in, part) * 4
    return {"f32": n_in * 4, "f16": n_in * 2}[dtype]


def row_chunks(dtype: str, n_rows: int, n_in: int, caps: KernelCaps) -> list[tuple[int, int]]:
    """(row_start, rows) ranges so that every bound part fits maxStorageBufferRange and every
    offset is a multiple of minStorageBufferOffsetAlignment; one range when the weight fits."""
    sizes = [row_bytes(dtype, n_in, p) for p in weight_parts(dtype)]
    if max(sizes) * n_rows <= caps.max_storage_range:
        return [(0, n_rows)]
    gran = 256
    for rb in sizes:
        gran = math.lcm(gran, caps.min_align // math.gcd(caps.min_align, rb))
    per = caps.max_storage_range // max(sizes) // gran * gran
    if per <= 0:
        raise ValueError(
            f"a {gran}-row slice of a {dtype} [{n_rows}, {n_in}] weight exceeds "
            f"maxStorageBufferRange {caps.max_storage_range}"
        )
    return [(r, min(per, n_rows - r)) for r in range(0, n_rows, per)]


def weight_bindings(name: str, dtype: str, r0: int, rows: int | None) -> tuple[Binding, ...]:
    return tuple(Binding(name, p, r0, rows) for p in weight_parts(dtype))


def dtype_define(dtype: str) -> tuple[str, str]:
    return ("DT_" + dtype.upper(), "1")


# Narrowest rows of wide K-quant units on GPUs (kwide): every matvec from KWIDE_MIN_IN, the gate/up
# pair and the lm_head from KWIDE_FFN_MIN_IN. H100, Llama-3.2-1B-shape Q4_K_M (hidden 2048), profiled
# step at ctx 1024: gate/up 259 µs wide (on integer dot products; 285 in floats) vs 349 narrow, the
# q6_k head 121 vs 144, while q/k/v (161 vs 141) and o (113 vs 108) lost wide; Qwen3-0.6B Q4_K_M
# (hidden 1024) lost everywhere (bench/results/nvidia-h100-80gb-hbm3/2026-11-25-session-h/ab-kwide-*).
KWIDE_MIN_IN = 4096
KWIDE_FFN_MIN_IN = 2048


def kwide(dtype: str, n_in: int, caps: KernelCaps, wide_from: int = KWIDE_MIN_IN) -> bool:
    """K-quant matvec rows in 32-element units (K-quant rows are whole 256-element superblocks).
    Automatic (caps.kwide 0) from wide_from-wide rows (KWIDE_MIN_IN, or KWIDE_FFN_MIN_IN for gate/up
    and the head): H100, Llama-3.1-8B Q4_K_M shape 4668 -> 4324 µs per token at ctx 64
    (ab-kwide-llama8b.json), while Qwen3-0.6B Q4_K_M's 1024..3072-wide rows ran ~5% slower in wide
    units (1227 vs 1167 µs, ab-cx-q06-*; bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kquant-wide/)."""
    return dtype in K_TYPES and (caps.kwide > 0 or (caps.kwide == 0 and n_in >= wide_from))


def unit_elems(dtype: str, wvec: bool) -> int:
    """Elements per invocation step of a matvec (shaders/dequant.glsl "unit")."""
    return (32 if wvec else 8) if dtype in QUANT_TYPES else (4 if wvec else 1) * (2 if dtype == "f16" else 1)


def matvec_shape(
    dtype: str, n_in: int, n_rows: int, caps: KernelCaps, wide_from: int = KWIDE_MIN_IN
) -> tuple[int, int, bool]:
    """(workgroup size, rows per workgroup, wide units) of a matvec; shared with fused kernels. Wide
    units (define WVEC): 16-byte loads of f32/f16 rows, 32-element K-quant units (dequant.glsl KWIDE)
    from wide_from-wide rows (kwide)."""
    wvec = (
        (dtype == "f32" and n_in % 4 == 0)
        or (dtype == "f16" and n_in % 8 == 0)
        or kwide(dtype, n_in, caps, wide_from)
    )
    units = n_in // unit_elems(dtype, wvec)
    # Measured on an H100 (bench/matvec_bench.py --sweep): matrices with few rows want every
    # invocation on its own unit (most parallelism); an lm_head-sized one (>= 2M units) is
    # faster with two units per invocation and two rows per workgroup, which halves the
    # per-row reduction work.
    if n_rows * units >= (2 << 20):
        wg, rows = wg_size(caps, -(-units // 2), cap=256), 2
    elif wvec and dtype in K_TYPES:
        # 32-element K-quant units: at most 128 lanes a row, 2 rows (H100, Llama-3.1-8B's q4_k / q6_k
        # matvecs: 256 lanes 10-30% slower; bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kquant-wide/), and
        # two units per lane where there are rows enough to fill the GPU without (H100, with the
        # in-place nibble decode: q4_k 4096x4096 12.67 vs 13.11 µs, 14336x4096 26.56 vs 28.07; but
        # 1024x4096 8.32 vs 7.86: bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kquant-pos/mv-sweep-*)
        wg, rows = wg_size(caps, units // 2 if n_rows >= 4096 else units, cap=128), 2
    else:
        # 8-element K-quant units (rows under KWIDE_MIN_IN): 128 lanes at most (H200, Qwen3-30B-A3B
        # Q4_K_M's 2048-wide q/k/v, GPU µs a step: 569 over 256 lanes, 521 over 128, 527 over 64:
        # bench/results/nvidia-h200/2026-11-27-moe-shapes/)
        wg = wg_size(caps, units, cap=128 if dtype in K_TYPES else 256)
        rows = 2 if n_rows >= 1536 else 1
    split = wvec and dtype in KSPLIT_TYPES and kw_split(n_in, caps, dtype)
    if wvec and dtype in ("q4_k", "q6_k") and n_rows >= 4096 and kw_balanced(units, caps) and not split:
        # 448 units (14336-wide rows, the 8B's downs): 128 lanes took 3.5 units each, so half the
        # lanes idled through the last step; 224 lanes (7 subgroups) take 2 each. H100 standalone:
        # q4_k 4096x14336 26.3 µs with 4 rows vs 28.4 at 128x2 (224x2 28.4, 112x4 29.1, 448x2 32.1);
        # q6_k 28.6 with 2 rows vs 29.6 (224x4 28.9): bench/results/nvidia-h100-80gb-hbm3/2026-11-25-session-g/
        wg, rows = units // 2, (4 if dtype == "q4_k" else 2)
    if split and dtype == "q6_k" and n_rows >= 4096 and kw_balanced(units, caps) and kq_idot(caps, dtype):
        # q6_k on integer dot products, split: 224 lanes of 4 rows on 14336-wide rows (H100, the 8B
        # step profile: 461 vs 477 µs whole in floats; 128 x 4 ~549, 64 x 4 ~492: 2026-11-25-session-h/)
        wg, rows = units // 2, 4
    if split and dtype == "q4_k" and n_rows >= 4096:
        # wide q4_k units split (kwide_rows.glsl) hold more rows' words at once: 4 rows of 64 lanes
        # on 4096-wide rows, 8 of 128 lanes on wider ones (H100, standalone: 14336x4096 24.2 vs 26.4 µs
        # with 2 rows, 28672x4096 39.9 vs 44.5, 4096x4096 12.0 vs 12.6, 4096x14336 25.1 vs 27.8); q6_k
        # (twice the words a unit) stays at 2 (4096x14336: 29.2 µs, 30.7 with 4): bench/results/
        # nvidia-h100-80gb-hbm3/2026-11-25-kwide-split/
        # With integer dot products (kq_idot) 4 rows on the wider ones too (H100, 8B step profile:
        # the q4_k downs 362 vs 380 µs with 8; 2026-11-25-session-h/ab-idot-8b-final-detail.json)
        wide_rows = 4 if kq_idot(caps) else 8
        wg, rows = (
            (wg_size(caps, units // 2, cap=64), 4)
            if units <= 128
            else (wg_size(caps, units // 2, cap=128), wide_rows)
        )
    wg = caps.matvec_wg or wg
    # a workgroup stores its rows from invocations 0..ROWS-1, so it cannot take more rows than it has
    return wg, min(caps.matvec_rows or rows, wg), wvec


def kv_defines(p: Program, cache: str) -> tuple[tuple[str, str], ...]:
    """KV_F16 where the cache is stored as f16 (shaders/kv_cache.glsl)."""
    return (("KV_F16", "1"),) if p.values[cache].dtype == "f16" else ()


def attention_splits(ctx: int, caps: KernelCaps) -> tuple[int, int]:
    """(splits S, max rows per split): the grid, fixed at build time from the context length. A step
    uses only the splits its rows need (shaders/attn_partials.glsl attn_live_splits: ceil(rows /
    max rows), at least a minimum), so its cost follows the position, not the context."""
    s = max(1, -(-ctx // max(1, caps.attn_max_chunk)))
    return s, -(-ctx // s)


def partials(out: str, h: int, d: int, s: int) -> tuple[str, int]:
    """Scratch name and bytes of split-K attention partials (shaders/attn_partials.glsl)."""
    return f"scratch:{out}.partials", s * h * (d + 2) * 4


# splits attention_combine loads per batch, the first batch together with the step word: a GPU
# grid has at most attention.MAX_SPLITS (16), so one batch takes every live split there
COMBINE_BATCH = 16


def combine_call(out: str, step: str, grid: AttnGrid, caps: KernelCaps) -> KernelCall:
    """attention_combine: the partials of `out` -> out, reading the splits live at step.pos. Spec
    (wg, *grid.spec()), as attention.absorb_combines reads it back."""
    part, nbytes = partials(out, grid.h, grid.d, grid.s)
    return KernelCall(
        "attention_combine",
        (wg_size(caps, grid.d, cap=128),) + grid.spec(),
        (Binding(part), Binding(out), Binding(step)),
        (1,),
        (grid.h, 1, 1),
        defines=(("CB", str(min(grid.s, COMBINE_BATCH))),),
        scratch=((part, nbytes),),
        label=out + "[combine]",
    )

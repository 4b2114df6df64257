"""Shapes of the tensor-core chunk matmul (shaders/matmul_rows_coop.comp, VK_KHR_cooperative_matrix).

Pure choice, no Vulkan: rows._matmul asks coop_shape first and falls back to the
register-blocked matmul_rows_wide where it says None (no coop path on the device, which
vk/coopmat.py chose from its shapes and subgroup sizes; a width under caps.matmul_coop, a tile
grid that does not divide the weight or the chunk exactly, or an architecture whose matmul inputs do not fit f16);
rows._attention asks coop_attention_shape (shaders/attention_rows_coop.comp) likewise.
"""

from __future__ import annotations

from vkdecode.lowering.caps import KernelCaps
from vkdecode.models import ARCHITECTURES

COOP_BK = 32  # the kernel's k step
COOP_LANES = 32  # lanes per subgroup (shaders/coopmat.glsl REQUIRED_SUBGROUP_SIZE, vk/coopmat.LANES)
# Default narrowest chunk. 16 (was 64, with the narrow tiles below): H200, batched steps of
# Llama-3.1-8B Q4_K_M, 16 rows 41 -> 17 ms, 32 rows 60 -> 23 ms; Qwen3-0.6B F16 16 rows 3.7k -> 4.1k
# tok/s, 32 rows 4.6k -> 6.6k (bench/results/nvidia-h200/2026-11-27-narrow-coop)
COOP_START = 16
# (SG_M, SG_N, BLK_M, BLK_N): subgroups along weight rows x chunk rows, 16x16 blocks per subgroup
# In order of preference. 64 x 128 first: H200, 512-row chunks, every matmul on one tile, Llama-3.1-8B
# Q4_K_M 53.9 ms of matmuls (2x4) vs 69.4 (4x2) vs 66.5 (2x2), Llama-3.2-1B F16 4.56 vs 4.70 vs 9.77.
# 128 x 128 (2, 2, 4, 4: 16 accumulators a subgroup) left the automatic choice: the 8B's gate/up ran
# at a third of the rate of its other matmuls on it (1.9 ms each; bench/results/nvidia-h200/
# 2026-11-27-coop-tiles); coop_tile="2x2:4x4" still forces it.
COOP_TILES = ((2, 2, 2, 4), (2, 2, 4, 2), (2, 2, 2, 2))
# Taken first wherever it divides the matmul (split over k to reach the workgroup target, as a
# forced coop_tile is): 64 x 256 as 2 x 4 subgroups of 2 x 4 blocks with a 64-wide k step (the
# 8-subgroup tile halves its barriers a k; at a 32-wide step it lost). H100, 512- / 2,000-token
# prompts, every matmul on it against the tiles above: Llama-3.1-8B Q4_K_M 58.0-58.6 -> 53.4 ms /
# 236-237 -> 216 ms, Llama-3.2-1B F16 10.9 -> 9.5 ms / 43.3 -> 37.7 ms; at a 32-wide step 63.2 ms;
# 4-subgroup tiles at a 64-wide step 77.8 (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-coop-wide)
# Only from an in-dim of 2048 (the shapes measured; Qwen3-0.6B's and SmolLM2's matmuls of 1024 and
# 576 would be split into a handful of k steps a workgroup), and not in models with expert layers:
# the Qwen3-30B-A3B shape's attention matmuls lost on it, two rounds in one H100 call, 512 / 2,000
# tokens 54.5 / 211.2 and 54.6 / 211.1 ms before it, 55.0 / 212.8 and 55.1 / 212.8 with it
# (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-owed16)
COOP_WIDE_TILE = (2, 4, 2, 4)
COOP_WIDE_BK = 64
COOP_WIDE_MIN_K = 2048
# Chunks of 16 to 63 rows (batched steps of 16 or 32 users, narrow prompt chunks) that no tile above
# divides: 64 weight rows x 32 or 16 chunk rows as subgroups of one 16 x 16 block (few registers a
# lane). H200, a Llama-3.1-8B Q4_K_M layer's matmuls: 32 rows 602.7 -> 399.8 us against 128 x 32 as
# 4 x 1 subgroups of 2 x 2 blocks, 16 rows 461.6 -> 395.3 against 64 x 16 as 2 x 1 of 2 x 1
# (bench/results/nvidia-h200/2026-11-27-moe-tiles); the grouped expert matmuls, moe_group.group_tile.
COOP_NARROW_TILES = ((4, 2, 1, 1), (4, 1, 1, 1))
COOP_MAX_SPLITS = 8
# From this in-dim a preferred tile split in two over k goes before a smaller tile: H200, the
# Qwen3-30B-A3B o-projection (2048 x 4096) at 512 rows, 64 x 128 in 2 splits 74.5 us, against
# 101.2 for 64 x 64 whole; at k 2048 a split lost (its q: 67.8 whole, 80.8 in two;
# bench/results/nvidia-h200/2026-11-28-coop-stages/mm-moe-sweep.json).
COOP_SPLIT2_MIN_K = 4096
COOP_GROUPS = 132  # default workgroups to reach: one per SM of an H100 (a tile is 4-8 warps of MMAs)
# architectures whose attention the tensor-core kernel lacks (gpt-oss's sinks)
COOP_REFUSED_ARCHS = tuple(name for name, a in ARCHITECTURES.items() if not a.coop)
# architectures whose matmul inputs pass f16's range (Gemma 3): rows scaled into it first
COOP_ROW_SCALED_ARCHS = tuple(name for name, a in ARCHITECTURES.items() if a.coop_row_scale)


def tile_dims(tile: tuple) -> tuple[int, int, int]:
    """(BM weight rows, BN chunk rows, workgroup size) of a COOP_TILES entry."""
    sg_m, sg_n, blk_m, blk_n = tile
    return 16 * blk_m * sg_m, 16 * blk_n * sg_n, COOP_LANES * sg_m * sg_n


def forced_bk(caps: KernelCaps) -> int:
    """caps.coop_bk, the k step forced for an A/B (32 or 64; 0: none)."""
    if caps.coop_bk not in (0, 32, 64):
        raise ValueError(f"coop_bk {caps.coop_bk}: 32 or 64")
    return caps.coop_bk


def coop_bk(caps: KernelCaps, tile: tuple) -> int:
    """The dense matmul's k step at a tile: the forced one, else COOP_WIDE_BK for 8 or more
    subgroups (a 64-wide step pays there only), else COOP_BK."""
    return forced_bk(caps) or (COOP_WIDE_BK if tile[0] * tile[1] >= 8 else COOP_BK)


def coop_shared_bytes(tile: tuple, staged: bool, bk: int = COOP_BK) -> int:
    """Shared bytes of matmul_rows_coop at a COOP_TILES-style tile: the weight and activation tiles
    (f16 rows of bk + 8), and with staged results (MOE's scattered rows, X_ROWSCALE's row
    factors) one 16 x 16 f32 block a subgroup."""
    bm, bn, _ = tile_dims(tile)
    return 2 * (bm + bn) * (bk + 8) + (4 * 256 * tile[0] * tile[1] if staged else 0)


def parse_tile(text: str) -> tuple:
    """'2x2:4x4' -> (2, 2, 4, 4)."""
    try:
        sg, blk = text.split(":")
        tile = tuple(int(v) for v in sg.split("x") + blk.split("x"))
    except ValueError:
        tile = ()
    if len(tile) != 4 or min(tile) < 1:
        raise ValueError(f"coop_tile {text!r}: expected SG_MxSG_N:BLK_MxBLK_N, e.g. 2x2:4x4")
    return tile


def coop_usable(caps: KernelCaps, arch: str) -> bool:
    """Both coop kernels: the device's coop path (its 16 x 16 x 16 f16 shape, and subgroups of
    the kernels' 32 lanes, fixed or required per pipeline) and an architecture they take."""
    return caps.coop_matrix and arch not in COOP_REFUSED_ARCHS


def coop_row_scaled(arch: str) -> bool:
    """The matmul's x rows scaled by powers of two into f16's range (to_f16.comp ROW_SCALE), its
    sums scaled back through a shared staging block of 16 x 16 floats a subgroup."""
    return arch in COOP_ROW_SCALED_ARCHS


def coop_shape(
    caps: KernelCaps, arch: str, n: int, rows: int, n_in: int, experts: bool = False
) -> tuple | None:
    """(SG_M, SG_N, BLK_M, BLK_N, k splits) of matmul_rows_coop for n weight rows x `rows` chunk
    rows over n_in, or None. Auto: COOP_WIDE_TILE (not in a model with `experts`) wherever it
    divides from COOP_WIDE_MIN_K (split over k until the grid reaches the target), else the first
    COOP_TILES entry dividing both whose grid reaches caps.matmul_groups workgroups (COOP_GROUPS
    by default), or half of it from n_in
    COOP_SPLIT2_MIN_K (then split in two over k), else the smallest dividing tile, split over k
    until it does; COOP_NARROW_TILES likewise where no COOP_TILES entry divides."""
    start = COOP_START if caps.matmul_coop == 0 else caps.matmul_coop
    if not coop_usable(caps, arch) or caps.matmul_coop < 0 or rows < start or n_in % COOP_BK:
        return None

    def fitting(tiles):
        fits = []
        for t in tiles:
            bm, bn, wg = tile_dims(t)
            bk = coop_bk(caps, t)
            shared = coop_shared_bytes(t, coop_row_scaled(arch), bk)
            if (
                n % bm == 0
                and rows % bn == 0
                and n_in % bk == 0
                and wg <= caps.max_invocations
                and shared <= caps.max_shared
            ):
                fits.append(t)
        return fits

    auto_wide = not caps.coop_tile and caps.coop_wide >= 0 and n_in >= COOP_WIDE_MIN_K and not experts
    wide = fitting([COOP_WIDE_TILE]) if auto_wide else []
    fits = wide or fitting([parse_tile(caps.coop_tile)] if caps.coop_tile else COOP_TILES)
    if not fits and not caps.coop_tile:
        fits = fitting(COOP_NARROW_TILES)
    if not fits:
        return None
    target = caps.matmul_groups or COOP_GROUPS

    def groups(t):
        bm, bn, _ = tile_dims(t)
        return (n // bm) * (rows // bn)

    # the wide tile wherever it divides; else a tile reaching the target by itself, or split in
    # two over a long k
    long_k = n_in >= COOP_SPLIT2_MIN_K
    tile = (
        fits[0] if wide else next((t for t in fits if groups(t) * (2 if long_k else 1) >= target), fits[-1])
    )
    splits = caps.matmul_splitk or max(1, min(COOP_MAX_SPLITS, -(-target // groups(tile))))
    return tile + (max(1, min(splits, n_in // coop_bk(caps, tile))),)


# Auto (attn_coop 0) up to this head_dim (the largest measured); > 0 forces the kernel at any
# head_dim. H100, bench/attention_rows_bench.py, per layer, attention_rows_gqa -> this kernel:
# Qwen3 heads (16/8 x 128) 512 rows at pos 0: 257 -> 73 us, at pos 1536: 1245 -> 246 us; SmolLM2
# heads (9/3 x 64) 145 -> 44 and 560 -> 152 us. (The kernel before the kv-head form, a subgroup
# per 16 rows and head reading K and V twice straight from the cache, ran 339 and 124 us at pos 0.)
# 256 since Gemma 3's heads (4/1 x 256, 512-key windows) measured: H100, Gemma-3-270M shape Q4_K_M,
# 512-token prompt 11.3 -> 9.3 ms, 2,000 tokens 69.8 -> 38.7 ms against the f32 kv-head kernel
# (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-gemma-coop)
COOP_ATTN_AUTO_MAX_D = 256
ATTN_KNOWN_ATTRS = {"n_heads", "n_kv_heads", "head_dim", "scale", "rows", "window"}
# subgroups per workgroup to aim for (16-row blocks x the G heads of a kv head), while the grid keeps
# COOP_ATTN_MIN_GROUPS workgroups (an H100's SMs). H100, one layer of 2048 rows from position 5952,
# scores in registers: the 8B's heads 2834 -> 1862 us at 8 against 4, Qwen3-0.6B's 1426 -> 979, the
# 1B's 1446 -> 1328; at 512 rows the 8B 49.2 -> 42.2 us (128 workgroups) but Qwen3-0.6B 34.6 -> 43.4
# (64) (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-attn17)
COOP_ATTN_SUBGROUPS = 8
COOP_ATTN_MIN_GROUPS = 128
COOP_ATTN_TILES = (64, 32, 16)  # keys per shared K/V tile, the largest that fits first


def coop_attention_shared(g: int, rb: int, d: int, bkv: int) -> int:
    """Shared bytes of attention_rows_coop: a K and a V tile (bkv rows of d + 8 halves); per
    subgroup scores (16 x (bkv + 4) floats), probabilities (16 x (bkv + 8) halves), row factors."""
    return 4 * bkv * (d + 8) + g * rb * 16 * (4 * (bkv + 4) + 2 * (bkv + 8) + 4)


def coop_attention_shape(caps: KernelCaps, arch: str, attrs: dict, kv_f16: bool) -> tuple[int, int] | None:
    """(RB 16-row blocks, BKV keys per tile) of attention_rows_coop, or None (the f32 kernels):
    head_dim <= COOP_ATTN_AUTO_MAX_D unless caps.attn_coop > 0 forces it, f16 caches (it reads them
    as f16 matrices), head_dim and chunk rows multiples of 16, and no attention
    attribute it does not implement. A workgroup is the G query heads of one kv head x RB row
    blocks (a subgroup each; all share each K/V tile): RB = COOP_ATTN_SUBGROUPS / G, halved until it
    divides the chunk and the grid has COOP_ATTN_MIN_GROUPS workgroups (caps.attn_subgroups: that
    many subgroups / G wherever it divides the chunk), at least 1; then the widest tile that fits
    the shared memory."""
    d, rows = int(attrs["head_dim"]), int(attrs.get("rows", 1))
    if caps.attn_coop == 0 and d > COOP_ATTN_AUTO_MAX_D:
        return None
    if (
        not coop_usable(caps, arch)
        or caps.attn_coop < 0
        or not kv_f16
        or d % 16
        or rows % 16
        or set(attrs) - ATTN_KNOWN_ATTRS
    ):
        return None
    kvh = int(attrs["n_kv_heads"])
    g = int(attrs["n_heads"]) // kvh
    rb = max(1, (caps.attn_subgroups or COOP_ATTN_SUBGROUPS) // g)
    while rb > 1 and (
        rows % (16 * rb) or (not caps.attn_subgroups and kvh * rows // (16 * rb) < COOP_ATTN_MIN_GROUPS)
    ):
        rb //= 2
    if COOP_LANES * g * rb > caps.max_invocations:
        return None
    if caps.attn_bkv:
        if caps.attn_bkv % 16 or coop_attention_shared(g, rb, d, caps.attn_bkv) > caps.max_shared:
            raise ValueError(f"caps.attn_bkv={caps.attn_bkv}: not a multiple of 16 or over the shared memory")
        return rb, caps.attn_bkv
    bkv = next((t for t in COOP_ATTN_TILES if coop_attention_shared(g, rb, d, t) <= caps.max_shared), 0)
    return (rb, bkv) if bkv else None

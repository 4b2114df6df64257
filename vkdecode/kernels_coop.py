"""Shapes of the tensor-core chunk matmul (shaders/matmul_rows_coop.comp, VK_NV_cooperative_matrix).

Pure choice, no Vulkan: kernels_rows._matmul asks coop_shape first and falls back to the
register-blocked matmul_rows_wide where it says None (no cooperative matrices, a subgroup size
other than a fixed 32, a width under caps.matmul_coop, a tile grid that does not divide the
weight or the chunk exactly, or an architecture whose matmul inputs do not fit f16);
kernels_rows._attention asks coop_attention_subgroups (shaders/attention_rows_coop.comp) likewise.
"""
from __future__ import annotations

from vkdecode.kernel_caps import KernelCaps

COOP_BK = 32                 # the kernel's k step
COOP_START = 64              # default narrowest chunk: under it the f32 kernels' tiles fit as well
# (SG_M, SG_N, BLK_M, BLK_N): subgroups along weight rows x chunk rows, 16x16 blocks per subgroup
COOP_TILES = ((2, 2, 4, 4), (2, 2, 4, 2), (2, 2, 2, 4), (2, 2, 2, 2))
COOP_MAX_SPLITS = 8
COOP_GROUPS = 132            # default workgroups to reach: one per SM of an H100 (a tile is 4-8 warps of MMAs)
# Gemma's activations overflow f16 (its reference implementations run in bf16 or f32); the kernel
# rounds its inputs to f16, so Gemma chunks keep the f32 kernels.
COOP_REFUSED_ARCHS = ("gemma3",)


def tile_dims(tile: tuple) -> tuple[int, int, int]:
    """(BM weight rows, BN chunk rows, workgroup size) of a COOP_TILES entry."""
    sg_m, sg_n, blk_m, blk_n = tile
    return 16 * blk_m * sg_m, 16 * blk_n * sg_n, 32 * sg_m * sg_n


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
    """Both coop kernels: cooperative matrices, subgroups fixed at 32 lanes (each kernel indexes its
    16 x 16 matrices by subgroup), and an architecture whose inputs fit f16."""
    return (caps.coop_matrix and caps.subgroup_size == 32 and caps.subgroup_fixed
            and arch not in COOP_REFUSED_ARCHS)


def coop_shape(caps: KernelCaps, arch: str, n: int, rows: int, n_in: int) -> tuple | None:
    """(SG_M, SG_N, BLK_M, BLK_N, k splits) of matmul_rows_coop for n weight rows x `rows` chunk
    rows over n_in, or None. Auto: the largest tile dividing both whose grid reaches
    caps.matmul_groups workgroups (COOP_GROUPS by default), else the smallest dividing tile,
    split over k until it does."""
    start = COOP_START if caps.matmul_coop == 0 else caps.matmul_coop
    if not coop_usable(caps, arch) or caps.matmul_coop < 0 or rows < start or n_in % COOP_BK:
        return None
    tiles = [parse_tile(caps.coop_tile)] if caps.coop_tile else list(COOP_TILES)
    fits = []
    for t in tiles:
        bm, bn, wg = tile_dims(t)
        shared = 2 * (bm + bn) * (COOP_BK + 8)
        if n % bm == 0 and rows % bn == 0 and wg <= caps.max_invocations and shared <= caps.max_shared:
            fits.append(t)
    if not fits:
        return None
    target = caps.matmul_groups or COOP_GROUPS

    def groups(t):
        bm, bn, _ = tile_dims(t)
        return (n // bm) * (rows // bn)
    tile = next((t for t in fits if groups(t) >= target), fits[-1])
    splits = caps.matmul_splitk or max(1, min(COOP_MAX_SPLITS, -(-target // groups(tile))))
    return tile + (max(1, min(splits, n_in // COOP_BK)),)


# Auto (attn_coop 0) only up to this head_dim. H100, bench/attention_rows_bench.py, per layer:
# SmolLM2 heads (9/3 x 64) 512 rows at pos 0 / 1536: coop 124 / 505 us vs attention_rows_gqa
# 145 / 561; Qwen3 heads (16/8 x 128): coop 339 / 1777 vs 256 / 1235 (a subgroup per 16 rows and
# head leaves too few warps per SM to hide the cache reads; attn_coop=1 forces it).
COOP_ATTN_AUTO_MAX_D = 64
ATTN_KNOWN_ATTRS = {"n_heads", "n_kv_heads", "head_dim", "scale", "rows", "window"}


def coop_attention_subgroups(caps: KernelCaps, arch: str, attrs: dict, kv_f16: bool) -> int:
    """Subgroups (16 chunk rows each) per attention_rows_coop workgroup, or 0 (the f32 kernels):
    head_dim <= COOP_ATTN_AUTO_MAX_D unless caps.attn_coop > 0 forces it, f16 caches (it reads them
    as f16 matrices), no sliding window, head_dim and chunk rows multiples of 16, and no attention
    attribute it does not implement."""
    d, rows = int(attrs["head_dim"]), int(attrs.get("rows", 1))
    if caps.attn_coop == 0 and d > COOP_ATTN_AUTO_MAX_D:
        return 0
    if (not coop_usable(caps, arch) or caps.attn_coop < 0 or not kv_f16 or int(attrs.get("window", 0))
            or d % 16 or rows % 16 or set(attrs) - ATTN_KNOWN_ATTRS):
        return 0
    # the most subgroups per workgroup (they share nothing but the launch) that still gives
    # COOP_GROUPS workgroups, else one; shared per subgroup: queries / last K block and last V block
    # (16 x (D + 8) halves each), scores (16 x 68 floats), probabilities (16 x 72 halves)
    fits = [n for n in (4, 2, 1) if rows % (16 * n) == 0 and 32 * n <= caps.max_invocations
            and n * 16 * (4 * (d + 8) + 4 * 68 + 2 * 72) <= caps.max_shared]
    heads = int(attrs["n_heads"])
    return next((n for n in fits if heads * rows // (16 * n) >= COOP_GROUPS), fits[-1] if fits else 0)

"""An MoE layer's expert matmuls over wide chunks (prompt chunks, the verify step, wide batched
steps), their slots grouped by expert: moe_group.comp sorts the slots on the GPU right after top-k,
and each expert matmul (matmul_rows, or matmul_rows_coop on tensor cores, with MOE) reads a chosen
expert's weights once per tile of its slots. Apart from lowering/moe.py (its per-slot matvecs and
fused regions), which takes these where group_rows says so.
"""

from __future__ import annotations

from fusion.ir import Program
from vkdecode.errors import DeviceLimitError
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps, row_chunks, weight_bindings, wg_size
from vkdecode.lowering.coop import (
    coop_row_scaled,
    coop_shared_bytes,
    coop_usable,
    parse_tile,
    tile_dims,
)
from vkdecode.lowering.matmul_rows import expert_bk, expert_matmul_calls


def experts(p: Program, w: str, caps: KernelCaps) -> tuple[tuple[Binding, ...], int, int, str]:
    """The whole 3-D weight's bindings, its rows per expert, in-dim and dtype."""
    v = p.values[w]
    e, m, k = v.shape
    if len(row_chunks(v.dtype, e * m, k, caps)) > 1:  # the kernels index every expert in one binding
        raise DeviceLimitError(
            f"{w}: {e} experts of {m}x{k} {v.dtype} in one binding are past this device's "
            f"maxStorageBufferRange ({caps.max_storage_range / 2**20:.0f} MiB); MoE layers need them in one"
        )
    return weight_bindings(w, v.dtype, 0, None), m, k, v.dtype


GROUP_TILE_MAX = 64  # slots per grouped tile at most (matmul_rows' widest BN)


def group_rows(p: Program, ids: str, e: int, caps: KernelCaps) -> int:
    """BN, slots per tile of the grouped expert matmuls over `ids`, or 0: too few slots
    (caps.moe_group, 0: 2 per expert; < 0 never), each takes its own matvec. BN: caps.moe_tile, else
    a power of two >= the average slots per expert (at least 16 where the tensor cores may take it,
    4 otherwise; 64 at most): a tile's rows past its expert's count are wasted work. H200,
    Qwen3-30B-A3B Q4_K_M, 512-row chunk (32 slots an expert on average): the chunk took 94.9 ms at
    BN 32, 106.2 at 64, 132.0 at 128."""
    slots = p.values[ids].numel
    least = caps.moe_group if caps.moe_group > 0 else 2 * e
    if caps.moe_group < 0 or slots < max(2, least):
        return 0
    if caps.moe_tile:
        if caps.moe_tile not in (4, 8, 16, 32, 64, 128):
            raise ValueError(f"moe_tile {caps.moe_tile}: expected a power of two from 4 to 128")
        return caps.moe_tile
    arch = str(p.meta.get("arch", ""))
    bn = 16 if coop_usable(caps, arch) else 4
    while bn < min(slots // e, GROUP_TILE_MAX):
        bn *= 2
    return bn


def group_tile(bn: int) -> tuple:
    """matmul_rows_coop's (SG_M, SG_N, BLK_M, BLK_N) for BN slots a tile: 64 weight rows as 4 subgroups
    of one 16-row block, few registers a lane. H200, Qwen3-30B-A3B's experts over 512 rows (BN 32):
    the gate (q4_k) 634 -> 328 us, the down (q6_k) 626 -> 372 against 2 x 1 subgroups of 2 x 2 blocks
    (153 -> 89 registers; bench/results/nvidia-h200/2026-11-27-moe-tiles)."""
    return (4, max(1, bn // 32), 1, min(2, bn // 16))


def _group_layout(p: Program, ids: str, e: int, bn: int) -> tuple[str, int, int]:
    """(scratch name, tiles at most, where order[] starts) of moe_group.comp's output for ids."""
    tiles = -(-p.values[ids].numel // bn) + e
    return f"scratch:{ids}.groups", tiles, 1 + 3 * tiles


def group_calls(p: Program, ids: str, e: int, caps: KernelCaps) -> list[KernelCall]:
    """moe_group over ids when the chunk is wide enough to group (else nothing)."""
    bn = group_rows(p, ids, e, caps)
    if not bn:
        return []
    name, _, order = _group_layout(p, ids, e, bn)
    slots = p.values[ids].numel
    return [
        KernelCall(
            "moe_group",
            (wg_size(caps, 256), e, slots, bn),
            (Binding(ids), Binding(name)),
            (1,),
            (1, 1, 1),
            scratch=((name, 4 * (order + slots)),),
            label=name,
        )
    ]


def grouped_matmul(
    p: Program, w: str, x: str, ids: str, out: str, caps: KernelCaps, gate: str = ""
) -> list[KernelCall]:
    """The expert matmul over slots grouped by expert, or [] (too few slots: per-slot matvecs).
    The groups come from the top-k that chose ids (moe_topk's lowering adds moe_group); ids from
    elsewhere (an op test) are grouped here first. gate: out = silu(gate) * the product (GLU_SILU)."""
    e, m, k = p.values[w].shape
    bn = group_rows(p, ids, e, caps)
    if not bn:
        return []
    wb, _, _, dtype = experts(p, w, caps)
    name, tiles, order = _group_layout(p, ids, e, bn)
    slots = p.values[ids].numel
    tile = parse_tile(caps.coop_tile) if caps.coop_tile else group_tile(bn)
    if caps.coop_tile and tile_dims(tile)[1] != bn:
        raise ValueError(f"coop_tile {caps.coop_tile}: not {bn} slots a tile, as the groups")
    bm, _, wg = tile_dims(tile)
    bk = expert_bk(caps)
    shared = coop_shared_bytes(tile, True, bk)  # results go through the staging block to their slots
    arch = str(p.meta.get("arch", ""))
    coop = (
        coop_usable(caps, arch)
        and caps.matmul_coop >= 0
        and bn >= 16
        and m % bm == 0
        and k % bk == 0
        and wg <= caps.max_invocations
        and shared <= caps.max_shared
    )
    xdiv = slots // (p.values[x].numel // k)
    dims, group = (k, m, slots), (bn, tiles, xdiv, order)
    calls = expert_matmul_calls(
        (wb, dtype), (x, name), out, dims, group, tile if coop else None, caps, gate, coop_row_scaled(arch)
    )
    own = (
        [] if any(o.kind == "moe_topk" and ids in o.outputs for o in p.ops) else group_calls(p, ids, e, caps)
    )
    return own + calls

"""Mixture-of-experts ops and regions -> kernel calls. Expert weights are 3-D (experts, out, in) and
bound whole; kernels read the chosen expert ids from a device buffer and offset by them, so nothing
in a call depends on which experts a token picks (the step is recorded once).

Per op: moe_topk (shaders/moe_topk.comp), moe_matmul (moe_matmul.comp, matvec.glsl's slot hooks),
moe_sum. Fused: RMS_NORM_MATMUL_MOE_TOPK, MOE_MATMUL_SILU_MUL (fused_swiglu.glsl with MOE),
MOE_MATMUL_SUM_ADD. The expert matvecs take the dense ones' shapes and wide K-quant units (kwide,
the split loop of kwide_rows.glsl with the expert's row base as KW_BASE): gate/up as the dense
gate/up (matvec.swiglu_shape) at one expert's rows, down as any other matvec.

Wide chunks (prompt chunks, the verify step, wide batched steps: at least two slots per expert on
average) group their slots by expert instead: moe_group.comp sorts the slots on the GPU right after
top-k, and each expert matmul (matmul_rows, or matmul_rows_coop on tensor cores, with MOE) reads a
chosen expert's weights once per tile of its slots. Per slot, a 512-row chunk of Qwen3-30B-A3B
(8 of 128 experts) read each expert's weights ~32 times. The fused MoE regions then run as their
ops (the grouped matmuls, silu_mul, moe_sum, add).
"""

from __future__ import annotations

import struct

from fusion.ir import Op, Program
from fusion.region import Region
from fusion.rules_moe import ROUTER_ONE_WORKGROUP_MAX
from vkdecode.lowering.calls import (
    Binding,
    KernelCall,
    KernelCaps,
    flat_groups,
    matvec_shape,
    reduce_defines,
    row_chunks,
    weight_bindings,
    wg_size,
)
from vkdecode.lowering.coop import COOP_BK, coop_usable, tile_dims
from vkdecode.lowering.matmul_rows import expert_matmul_call
from vkdecode.lowering.matvec import Slots, mv_defines, norm_matmul_call, swiglu_shape


def _experts(p: Program, w: str, caps: KernelCaps) -> tuple[tuple[Binding, ...], int, int, str]:
    """The whole 3-D weight's bindings, its rows per expert, in-dim and dtype."""
    v = p.values[w]
    e, m, k = v.shape
    if len(row_chunks(v.dtype, e * m, k, caps)) > 1:
        raise ValueError(f"{w}: {e} experts of {m}x{k} {v.dtype} exceed maxStorageBufferRange (one binding)")
    return weight_bindings(w, v.dtype, 0, None), m, k, v.dtype


def _norm(attrs: dict) -> tuple:
    return (("NORM", "1"),) if attrs.get("norm") else ()


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
    bn = 16 if coop_usable(caps, str(p.meta.get("arch", ""))) else 4
    while bn < min(slots // e, GROUP_TILE_MAX):
        bn *= 2
    return bn


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


def _grouped_matmul(p: Program, w: str, x: str, ids: str, out: str, caps: KernelCaps) -> list[KernelCall]:
    """The expert matmul over slots grouped by expert, or [] (too few slots: per-slot matvecs).
    The groups come from the top-k that chose ids (moe_topk's lowering adds moe_group); ids from
    elsewhere (an op test) are grouped here first."""
    e, m, k = p.values[w].shape
    bn = group_rows(p, ids, e, caps)
    if not bn:
        return []
    wb, _, _, dtype = _experts(p, w, caps)
    name, tiles, order = _group_layout(p, ids, e, bn)
    slots = p.values[ids].numel
    # 64 weight rows x BN slots, 2 x 2 blocks of 16 x 16 a subgroup (one 16-row block under 32)
    tile = (2, max(1, bn // 32), 2, min(2, bn // 16))
    bm, _, wg = tile_dims(tile)
    shared = 2 * (bm + bn) * (COOP_BK + 8) + 4 * 256 * 2
    coop = (
        coop_usable(caps, str(p.meta.get("arch", "")))
        and caps.matmul_coop >= 0
        and bn >= 16
        and m % bm == 0
        and k % COOP_BK == 0
        and wg <= caps.max_invocations
        and shared <= caps.max_shared
    )
    xdiv = slots // (p.values[x].numel // k)
    call = expert_matmul_call(
        (wb, dtype), (x, name), out, (k, m, slots), (bn, tiles, xdiv, order), tile if coop else None, out
    )
    own = (
        [] if any(o.kind == "moe_topk" and ids in o.outputs for o in p.ops) else group_calls(p, ids, e, caps)
    )
    return own + [call]


def moe_topk(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    logits, (ids, weights) = op.inputs[0], op.outputs
    e, k = int(op.attrs["n_experts"]), int(op.attrs["k"])
    b = (Binding(logits), Binding(ids), Binding(weights))
    rows = p.values[logits].numel // e
    defines = reduce_defines(caps) + _norm(op.attrs)
    # one subgroup where it reduces by itself: top-k's 2 k reductions then need no barrier
    wg = caps.subgroup_size if caps.subgroup_arithmetic and caps.subgroup_size >= 8 else wg_size(caps, e)
    return [
        KernelCall("moe_topk", (wg, e, k), b, (1, 2), flat_groups(rows), defines=defines, label=ids)
    ] + group_calls(p, ids, e, caps)


def _matvec_call(shader: str, p: Program, w: str, inputs, out: str, layout, caps: KernelCaps) -> KernelCall:
    """A matvec over a 3-D expert weight: bindings weight, inputs, out; spec (wg, K, M, ROWS, *tail)
    and its workgroups from layout(blocks of one expert's rows) -> (tail, workgroups)."""
    wb, m, k, dtype = _experts(p, w, caps)
    wg, rpw, wvec = matvec_shape(dtype, k, m, caps)
    b = wb + tuple(Binding(v) for v in inputs) + (Binding(out),)
    tail, groups = layout(-(-m // rpw))
    return KernelCall(
        shader,
        (wg, k, m, rpw) + tail,
        b,
        (len(b) - 1,),
        flat_groups(groups),
        push=struct.pack("<I", 0),  # matvec.glsl's row0
        defines=mv_defines(dtype, wvec, caps, k),
        label=out,
    )


def moe_matmul(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    w, x, ids = op.inputs
    grouped = _grouped_matmul(p, w, x, ids, op.outputs[0], caps)
    if grouped:
        return grouped
    k = p.values[w].shape[2]
    slots, xrows = p.values[ids].numel, p.values[x].numel // k
    # spec 4 XDIV (slots per x row), 5 BLOCKS, 6 K again; a workgroup per slot and row block
    return [
        _matvec_call(
            "moe_matmul", p, w, (x, ids), op.outputs[0], lambda n: ((slots // xrows, n, k), slots * n), caps
        )
    ]


def moe_sum(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    y, sw = op.inputs
    out = op.outputs[0]
    n = p.values[y].numel // p.values[sw].numel
    rows = p.values[out].numel // n
    wg = wg_size(caps, n * rows)
    b = (Binding(y), Binding(sw), Binding(out))
    spec = (wg, n, p.values[sw].numel // rows, rows)
    return [KernelCall("moe_sum", spec, b, (2,), flat_groups(-(-n * rows // wg)), label=out)]


def sigmoid_scale(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    g, y = op.inputs
    out = op.outputs[0]
    n = p.values[y].numel
    wg = wg_size(caps, n)
    b = (Binding(g), Binding(y), Binding(out))
    spec = (wg, n, n // p.values[g].numel)
    return [KernelCall("sigmoid_scale", spec, b, (2,), flat_groups(-(-n // wg)), label=out)]


# ---------------------------------------------------------------- fused regions


# The fused router is one workgroup that reads the whole E x K router matrix: right for small
# routers, but Qwen3-30B-A3B's 128 x 2048 took 87 us a layer that way on the H200 (4.2 of the
# step's 7.5 ms). Above ROUTER_ONE_WORKGROUP_MAX elements (fusion/rules_moe.py) the router runs on
# the multi-workgroup rms_norm_matmul (which also writes the normed h), then top-k: two dispatches
# (caps.router_ops: the region's three ops, norm in one workgroup, matvec, top-k, as before); in a
# decode step the top-k then runs inside the experts' gate/up (rms_norm_matmul_moe_topk_silu_mul).


def router_logits_call(p: Program, region: Region, caps: KernelCaps) -> KernelCall:
    """rms_norm_matmul writing h and the logits (the region's matmul output)."""
    r = region.roles
    (mm,) = (p.ops[i] for i in region.ops if p.ops[i].kind == "matmul")
    dense = Region(
        region.name,
        region.rule,
        region.ops,
        region.inputs,
        region.outputs,
        {"x": r["x"], "norm_w": r["norm_w"], "weights": [r["w"]], "biases": [None], "outs": [mm.outputs[0]]},
        {"eps": region.attrs["eps"]},
    )
    return norm_matmul_call(p, dense, [0], caps, normed=r["h"])


def _router_two_calls(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall]:
    """rms_norm_matmul writing h and the logits, then moe_topk's call."""
    (topk,) = (p.ops[i] for i in region.ops if p.ops[i].kind == "moe_topk")
    return [router_logits_call(p, region, caps)] + moe_topk(p, topk, caps)


def rms_norm_matmul_moe_topk(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    r = region.roles
    v = p.values[r["w"]]
    e, k = v.shape
    if p.values[r["ids"]].numel > int(region.attrs["k"]):  # a chunk: rows are ops (moe_topk per row)
        return None
    if len(row_chunks(v.dtype, e, k, caps)) > 1:
        return None
    if e * k > (caps.router_one_wg or ROUTER_ONE_WORKGROUP_MAX) or 4 * e > caps.max_shared // 2:
        return None if caps.router_ops else _router_two_calls(p, region, caps)
    wvec = matvec_shape(v.dtype, k, e, caps)[2]
    b = (Binding(r["x"]), Binding(r["norm_w"])) + weight_bindings(r["w"], v.dtype, 0, None)
    b += (Binding(r["h"]), Binding(r["ids"]), Binding(r["weights"]))
    spec = (wg_size(caps, 256), k, e, int(region.attrs["k"]), float(region.attrs["eps"]))
    return [
        KernelCall(
            "rms_norm_matmul_moe_topk",
            spec,
            b,
            (len(b) - 3, len(b) - 2, len(b) - 1),
            (1, 1, 1),
            defines=mv_defines(v.dtype, wvec, caps, k) + _norm(region.attrs),
            label=r["ids"],
        )
    ]


def moe_matmul_silu_mul(
    p: Program, region: Region, caps: KernelCaps, route: Region | None = None
) -> list[KernelCall] | None:
    """fused_swiglu.glsl with MOE: workgroup g takes slot g / BLOCKS of the chosen experts. With
    route (the router's roles: logits, ids, weights, k, norm), MOE_ROUTE: the kernel ranks the
    logits itself and writes ids and weights (shaders/moe_route.glsl)."""
    r = region.roles
    if group_rows(p, r["ids"], p.values[r["w_gate"]].shape[0], caps):
        return None  # wide: the grouped matmuls, then silu_mul
    _, m, k, dtype = _experts(p, r["w_gate"], caps)
    shape = swiglu_shape(dtype, k, m, caps)
    if shape is None:
        return None
    wg, rpw, wvec = shape
    s = Slots()
    s.add("B_X", Binding(r["x"]))
    s.weight(p, r["w_gate"], 0)
    s.weight(p, r["w_up"], 1)
    y = s.add("B_Y", Binding(r["a"]))
    blocks = -(-m // rpw)
    spec, writes, defines = (wg, k, rpw, 0.0, m, blocks), (y,), (("MOE", "1"),)
    if route is None:
        s.add("B_IDS", Binding(r["ids"]))
    else:
        s.add("B_LOGITS", Binding(route.roles["logits"]))
        writes += (s.add("B_IDS", Binding(r["ids"])), s.add("B_SW", Binding(route.roles["weights"])))
        spec += (p.values[r["w_gate"]].shape[0], int(route.attrs["k"]))
        defines += (("MOE_ROUTE", "1"),) + ((("MOE_NORM", "1"),) if route.attrs.get("norm") else ())
        # one subgroup a workgroup (GPUs' gate/up shape): argmax passes of subgroup reductions
        sg = caps.subgroup_arithmetic and wg == caps.subgroup_size
        defines += (("MOE_ROUTE_SG", "1"),) if sg else ()
    return [
        KernelCall(
            "matmul_silu_mul",
            spec,
            tuple(s.bindings),
            writes,
            flat_groups(p.values[r["ids"]].numel * blocks),
            defines=mv_defines(dtype, wvec, caps, k) + tuple(s.defines) + defines,
            label=r["a"],
        )
    ]


def moe_matmul_sum_add(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    r = region.roles
    if group_rows(p, r["ids"], p.values[r["w"]].shape[0], caps):
        return None  # wide: the grouped matmul, then moe_sum and add
    k = p.values[r["w"]].shape[2]
    slots = p.values[r["ids"]].numel
    inputs = (r["x"], r["ids"], r["sw"], r["r"])
    return [_matvec_call("moe_matmul_sum_add", p, r["w"], inputs, r["s"], lambda n: ((slots, k), n), caps)]

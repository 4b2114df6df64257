"""Mixture-of-experts ops and regions -> kernel calls. Expert weights are 3-D (experts, out, in) and
bound whole; kernels read the chosen expert ids from a device buffer and offset by them, so nothing
in a call depends on which experts a token picks (the step is recorded once).

Per op: moe_topk (shaders/moe_topk.comp), moe_matmul (moe_matmul.comp, matvec.glsl's slot hooks),
moe_sum. Fused: RMS_NORM_MATMUL_MOE_TOPK, MOE_MATMUL_SILU_MUL (fused_swiglu.glsl with MOE),
MOE_MATMUL_SUM_ADD, and gpt-oss's forms of them with bias rows (define BIAS). The expert matvecs
take the dense ones' shapes and wide K-quant units (kwide, the split loop of kwide_rows.glsl with
the expert's row base as KW_BASE): gate/up as the dense gate/up (matvec.swiglu_shape) at one
expert's rows, down as any other matvec.

Wide chunks (at least two slots per expert on average) group their slots by expert instead
(lowering/moe_group.py): per slot, a 512-row chunk of Qwen3-30B-A3B (8 of 128 experts) read each
expert's weights ~32 times. The decode step's fused MoE regions then run as their ops (the
grouped matmuls, silu_mul, moe_sum, add); a prompt chunk's rules fold silu_mul and the add into
the kernels beside them (lowering/moe_chunk.py).
"""

from __future__ import annotations

import struct
from dataclasses import replace

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
    unit_elems,
    weight_bindings,
    wg_size,
)
from vkdecode.lowering.matvec import Slots, mv_defines, norm_matmul_call, swiglu_shape
from vkdecode.lowering.moe_group import experts, group_calls, group_rows, grouped_matmul


def _norm(attrs: dict) -> tuple:
    return (("NORM", "1"),) if attrs.get("norm") else ()


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


MOE_GLU_ROWS = 2  # rows of gate and of up a workgroup of the chosen experts' gate/up


def slots_shape(dtype: str, k: int, m: int, slots: int, caps: KernelCaps) -> tuple[int, int, bool]:
    """matvec_shape of a matvec whose rows sum `slots` rows each (moe_matmul_sum_add; matvec.glsl
    MV_SLOTS_FLAT walks every slot's units as one loop): wide K-quant units at any width, lanes for
    the slots' units up to 128. H200, Qwen3-30B-A3B Q4_K_M's 768-wide downs (8 slots x 24 units),
    GPU µs a step: 628-633 in 8-element units over 128 lanes; wide, the flat loop: 534 over 128
    lanes, 566-571 over 64, 661-670 over 32; wide over 32 lanes with the slots in turn 745-755
    (bench/results/nvidia-h200/2026-11-27-moe-*/)."""
    wg, rpw, wvec = matvec_shape(dtype, k, m, caps, wide_from=256)
    if caps.matvec_wg:
        return wg, rpw, wvec
    wg = wg_size(caps, slots * k // unit_elems(dtype, wvec), cap=128)
    return wg, min(caps.matvec_rows or rpw, wg), wvec


def _matvec_call(
    shader: str, p: Program, w: str, inputs, out: str, layout, caps: KernelCaps, slots: int = 1
) -> KernelCall:
    """A matvec over a 3-D expert weight: bindings weight, inputs, out; spec (wg, K, M, ROWS, *tail)
    and its workgroups from layout(blocks of one expert's rows) -> (tail, workgroups); slots > 1:
    each output row sums that many slots' rows (moe_matmul_sum_add)."""
    wb, m, k, dtype = experts(p, w, caps)
    wg, rpw, wvec = slots_shape(dtype, k, m, slots, caps) if slots > 1 else matvec_shape(dtype, k, m, caps)
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
    grouped = grouped_matmul(p, w, x, ids, op.outputs[0], caps)
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


def moe_matmul_bias(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """MOE_MATMUL_BIAS (gpt-oss): moe_matmul.comp with BIAS, the expert's bias row added as each
    row is stored. Wide slots (a chunk's) decline: the grouped matmul, then moe_bias."""
    r = region.roles
    w, x, ids = r["w"], r["x"], r["ids"]
    if group_rows(p, ids, p.values[w].shape[0], caps):
        return None
    k = p.values[w].shape[2]
    slots, xrows = p.values[ids].numel, p.values[x].numel // k
    call = _matvec_call(
        "moe_matmul", p, w, (x, ids), r["o"], lambda n: ((slots // xrows, n, k), slots * n), caps
    )
    return [_with_bias(call, r["b"])]


def _with_bias(call: KernelCall, b: str) -> KernelCall:
    """A matvec call over expert weights with the experts' bias rows bound after its output (BIAS)."""
    return replace(call, bindings=call.bindings + (Binding(b),), defines=call.defines + (("BIAS", "1"),))


def moe_sum(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    return [moe_sum_call(p, *op.inputs, op.outputs[0], caps)]


def moe_sum_call(p: Program, y: str, sw: str, out: str, caps: KernelCaps, res: str = "") -> KernelCall:
    """moe_sum.comp: out = the slots' weighted sum, + res with RES (a chunk's MOE_SUM_ADD_CHUNK)."""
    n = p.values[y].numel // p.values[sw].numel
    rows = p.values[out].numel // n
    wg = wg_size(caps, n * rows)
    b = (Binding(y), Binding(sw), Binding(out)) + ((Binding(res),) if res else ())
    spec = (wg, n, p.values[sw].numel // rows, rows)
    defines = (("RES", "1"),) if res else ()
    return KernelCall("moe_sum", spec, b, (2,), flat_groups(-(-n * rows // wg)), defines=defines, label=out)


def moe_bias(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    x, b, ids = op.inputs
    out = op.outputs[0]
    n = p.values[x].numel
    wg = wg_size(caps, n)
    bindings = (Binding(x), Binding(b), Binding(ids), Binding(out))
    spec = (wg, n, p.values[b].shape[1])
    return [KernelCall("moe_bias", spec, bindings, (3,), flat_groups(-(-n // wg)), label=out)]


def swiglu_clamp(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    out = op.outputs[0]
    n = p.values[out].numel
    wg = wg_size(caps, n)
    spec = (wg, n, float(op.attrs["alpha"]), float(op.attrs["limit"]))
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [KernelCall("swiglu_clamp", spec, b, (2,), flat_groups(-(-n // wg)), label=out)]


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
    """rms_norm_matmul writing h and the logits the top-k reads (gpt-oss: + the router's bias)."""
    r = region.roles
    (topk,) = (p.ops[i] for i in region.ops if p.ops[i].kind == "moe_topk")
    roles = {"x": r["x"], "norm_w": r["norm_w"], "weights": [r["w"]], "biases": [r.get("b")]}
    dense = Region(
        region.name,
        region.rule,
        region.ops,
        region.inputs,
        region.outputs,
        {**roles, "outs": [topk.inputs[0]]},
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
    writes = (len(b) - 3, len(b) - 2, len(b) - 1)
    bias = (("BIAS", "1"),) if "b" in r else ()
    b += (Binding(r["b"]),) if bias else ()
    spec = (wg_size(caps, 256), k, e, int(region.attrs["k"]), float(region.attrs["eps"]))
    return [
        KernelCall(
            "rms_norm_matmul_moe_topk",
            spec,
            b,
            writes,
            (1, 1, 1),
            defines=mv_defines(v.dtype, wvec, caps, k) + _norm(region.attrs) + bias,
            label=r["ids"],
        )
    ]


def moe_matmul_silu_mul(
    p: Program, region: Region, caps: KernelCaps, route: Region | None = None
) -> list[KernelCall] | None:
    """fused_swiglu.glsl with MOE: workgroup g takes slot g / BLOCKS of the chosen experts. With
    route (the router's roles: logits, ids, weights, k, norm), MOE_ROUTE: the kernel ranks the
    logits itself and writes ids and weights (shaders/moe_route.glsl). gpt-oss's region
    (MOE_MATMUL_BIAS_SWIGLU_CLAMP) adds the experts' bias rows (BIAS) and its clamped GLU."""
    r = region.roles
    if group_rows(p, r["ids"], p.values[r["w_gate"]].shape[0], caps):
        return None  # wide: the grouped matmuls, then silu_mul
    e = p.values[r["w_gate"]].shape[0]
    _, m, k, dtype = experts(p, r["w_gate"], caps)
    # 2 rows of each weight a workgroup, not the dense gate/up's 4 (H200, Qwen3-30B-A3B Q4_K_M: the
    # router + gate/up region 949 -> 912 µs a step: bench/results/nvidia-h200/2026-11-27-moe-shapes/)
    shape = swiglu_shape(dtype, k, m, replace(caps, matvec_rows=caps.matvec_rows or MOE_GLU_ROWS))
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
    if "b_gate" in r:
        s.add("BB_0", Binding(r["b_gate"]))
        s.add("BB_1", Binding(r["b_up"]))
        a = region.attrs
        defines += (
            ("BIAS", "1"),
            ("GLU_CLAMP", "1"),
            ("GLU_ALPHA", repr(a["alpha"])),
            ("GLU_LIMIT", repr(a["limit"])),
        )
    if route is None:
        s.add("B_IDS", Binding(r["ids"]))
    else:
        s.add("B_LOGITS", Binding(route.roles["logits"]))
        writes += (s.add("B_IDS", Binding(r["ids"])), s.add("B_SW", Binding(route.roles["weights"])))
        spec += (e, int(route.attrs["k"]))
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
    """MOE_MATMUL_SUM_ADD, and gpt-oss's MOE_MATMUL_BIAS_SUM_ADD: with BIAS the experts' bias rows
    bound after y, each slot's weighted as its output."""
    r = region.roles
    if group_rows(p, r["ids"], p.values[r["w"]].shape[0], caps):
        return None  # wide: the grouped matmul, then moe_sum and add
    k = p.values[r["w"]].shape[2]
    slots = p.values[r["ids"]].numel
    inputs = (r["x"], r["ids"], r["sw"], r["r"])
    call = _matvec_call(
        "moe_matmul_sum_add", p, r["w"], inputs, r["s"], lambda n: ((slots, k), n), caps, slots
    )
    return [_with_bias(call, r["b"]) if "b" in r else call]

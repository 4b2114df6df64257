"""x planes of a batched step (caps.xplanes): the x rows of its K-quant matvecs on integer dot
products, made once a step instead of by every workgroup for every unit.

A batched step's matvec (rows.batch_matvec) over split wide q4_k / q6_k units with KQ_IDOT turned
each unit's 2 x 16 activations of each x row into byte planes, a factor and a sum in registers
(dequant.glsl kw_planes, kw_xsum): every workgroup over the row, for every x row. H200, Llama-3.1-8B
Q4_K_M, a step's matmuls 3.3 / 5.0 / 9.2 / 20.0 ms at 1 / 2 / 4 / 8 rows: the cost grows per x row.
Here the value's producer writes them for all its rows: the batched rms_norm and silu_mul in their
own call (define XPLANES), any other (attention) by an xplanes call after its own; a value with no
producing op (a lone op under test) by an xplanes call before its first such matvec. The matvecs
read them (define KW_XPLANES, binding 4). The same arithmetic: the logits keep their bits.
"""

from __future__ import annotations

from dataclasses import replace

from fusion.ir import Op, Program
from vkdecode.lowering.calls import (
    Binding,
    KernelCall,
    KernelCaps,
    flat_groups,
    matvec_shape,
    planes_defines,
    wg_size,
    wvec_defines,
    x_planes,
)
from vkdecode.lowering.rows import batch_matvec

GROUP = 16  # activations a group (a half of a wide unit): 2 or 3 uvec4 planes + vec2 (2^-s, sum)


def planes_name(x: str) -> str:
    """The scratch holding value x's planes (one per value: several may be live at once)."""
    return f"scratch:{x}.xplanes"


def planes_bytes(rows: int, n_in: int, caps: KernelCaps) -> int:
    return rows * (n_in // GROUP) * (16 * x_planes(caps) + 8)


def reads_planes(p: Program, op: Op, caps: KernelCaps) -> bool:
    """Whether op is a batched step's matmul of at least caps.xplanes rows (0: any; < 0: none)
    whose matvec takes split wide units on integer dot products (wvec_defines' KQ_IDOT for its
    dtype), and so reads its x as planes."""
    if caps.xplanes < 0 or op.kind != "matmul" or not op.attrs.get("batch"):
        return False
    if int(op.attrs.get("rows", 1)) < max(1, caps.xplanes) or not batch_matvec(p, op, caps):
        return False
    wv = p.values[op.inputs[0]]
    n_out, n_in = wv.shape
    if wv.dtype not in ("q4_k", "q6_k") or n_in % (2 * GROUP):
        return False
    wvec = matvec_shape(wv.dtype, n_in, n_out, caps)[2]
    return "KQ_IDOT" in dict(wvec_defines(wvec, caps, n_in, wv.dtype))


def planes_call(p: Program, x: str, n_in: int, caps: KernelCaps) -> KernelCall:
    rows = p.values[x].numel // n_in
    n = rows * (n_in // GROUP)
    wg = wg_size(caps, n, cap=64)
    name = planes_name(x)
    return KernelCall(
        "xplanes",
        (wg, n_in, rows),
        (Binding(x), Binding(name)),
        (1,),
        flat_groups(-(-n // wg)),
        scratch=((name, planes_bytes(rows, n_in, caps)),),
        defines=planes_defines(caps),
        label=name,
    )


def planes_width(p: Program, x: str, caps: KernelCaps, upto: int | None = None) -> int:
    """n_in of the first matmul (before op #upto, if given) reading x's planes, else 0."""
    for i, op in enumerate(p.ops[:upto]):
        if op.kind == "matmul" and op.inputs[1] == x and reads_planes(p, op, caps):
            return p.values[op.inputs[0]].shape[1]
    return 0


def with_planes(p: Program, op_index: int, calls: list[KernelCall], caps: KernelCaps) -> list[KernelCall]:
    """op #op_index's calls, followed by the planes of each of its outputs a matvec reads as planes
    (or preceded by those of its x, where it reads them and x has no producer or earlier reader)."""
    op = p.ops[op_index]
    if caps.xplanes < 0 or not (p.meta.get("batch_rows") or op.attrs.get("batch")):
        return calls  # not a batched step's (nor a lone batched op under test)
    before = []
    if reads_planes(p, op, caps):
        x = op.inputs[1]
        if x not in p.producers() and not planes_width(p, x, caps, op_index):
            before.append(planes_call(p, x, p.values[op.inputs[0]].shape[1], caps))
    return before + outputs_planes(p, op.outputs, calls, caps)


def outputs_planes(p: Program, outputs, calls: list[KernelCall], caps: KernelCaps) -> list[KernelCall]:
    """calls (an op's, or a fused region's: lowering/regions.py), writing the planes of each output
    a matvec reads as planes: folded into the one producing call where it can (fold_planes), else
    an xplanes call after them. Without it a fused batched attention's o-projection read planes
    never written."""
    after = []
    for out in outputs:
        n_in = planes_width(p, out, caps)
        if n_in:
            folded = fold_planes(p, calls, out, n_in, caps)
            if folded is None:
                after.append(planes_call(p, out, n_in, caps))
            else:
                calls = [folded]
    return calls + after


def norm_parts(n_in: int, caps: KernelCaps) -> int:
    """Workgroups a row of a norm writing planes (caps.norm_parts; 0: 16 groups each on GPUs, one
    a row on CPUs), each summing the row's squares itself. H200, Llama-3.1-8B Q4_K_M 4-row step: one
    workgroup a row, the add apart, took 750 µs of ~7.7 ms profiled (64 norms): 2026-11-27-kq-planes."""
    if caps.norm_parts > 0:
        return min(caps.norm_parts, n_in // GROUP)
    return 1 if caps.device_cpu else max(1, n_in // GROUP // 16)


def fold_planes(
    p: Program, calls: list[KernelCall], x: str, n_in: int, caps: KernelCaps
) -> KernelCall | None:
    """The producer's one call writing x's planes too (define XPLANES: rms_norm or add_rms_norm
    over whole rows, silu_mul), or None (an xplanes call follows it). Each extra dependent dispatch costs ~2.5 µs on
    a GPU: the norms and silu_mul are 3 of the 4 producers of a Llama layer (attention the 4th)."""
    if len(calls) != 1 or n_in % GROUP:
        return None
    (c,) = calls
    rows = p.values[x].numel // n_in
    name = planes_name(x)
    fold = {
        "bindings": c.bindings + (Binding(name),),
        "writes": c.writes + (len(c.bindings),),
        "defines": c.defines + (("XPLANES", "1"),) + planes_defines(caps),
        "scratch": c.scratch + ((name, planes_bytes(rows, n_in, caps)),),
    }
    norm = {"rms_norm": 2, "add_rms_norm": 4}.get(c.shader)
    if norm and c.spec[1] == n_in and c.bindings[norm].value == x:
        parts = norm_parts(n_in, caps)
        return replace(c, spec=c.spec + (rows, parts), groups=flat_groups(rows * parts), **fold)
    if c.shader == "silu_mul" and c.bindings[2].value == x:
        n = rows * n_in // GROUP  # an invocation a group of 16
        return replace(c, spec=c.spec + (n_in,), groups=flat_groups(-(-n // c.spec[0])), **fold)
    return None

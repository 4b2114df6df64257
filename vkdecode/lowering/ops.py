"""Op -> kernel calls: which shader, its specialization constants, bindings and dispatch size.

The executors consume op_calls(); nothing here touches Vulkan. Per-token values (token, position)
are never in a call: shaders read them from the step buffer, so the same calls serve the unfused
executor (re-recorded every token) and replay (recorded once).
"""

from __future__ import annotations

import struct

from fusion.ir import Op, Program
from vkdecode.lowering import linear_attention, moe
from vkdecode.lowering.calls import (
    AttnGrid,
    Binding,
    KernelCall,
    KernelCaps,
    attention_splits,
    combine_call,
    dtype_define,
    flat_groups,
    kv_defines,
    matvec_shape,
    partials,
    reduce_defines,
    row_chunks,
    weight_bindings,
    wg_size,
    wvec_defines,
)
from vkdecode.lowering.rows import row_op_calls  # prompt chunks (fusion/chunk.py)
from vkdecode.lowering.xplanes import planes_bytes, planes_name, reads_planes, with_planes

# ---------------------------------------------------------------- per op kind


def _embed(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    table, step = op.inputs
    tv = p.values[table]
    vocab, dim = tv.shape
    wg = wg_size(caps, dim)
    chunks = row_chunks(tv.dtype, vocab, dim, caps)
    calls = []
    for r0, rows in chunks:
        b = weight_bindings(table, tv.dtype, r0, None if len(chunks) == 1 else rows)
        b += (Binding(step), Binding(op.outputs[0]))
        calls.append(
            KernelCall(
                "embed",
                (wg, dim, rows, float(op.attrs.get("scale", 1.0))),
                b,
                (len(b) - 1,),
                flat_groups(-(-dim // wg)),
                push=struct.pack("<I", r0),
                defines=(dtype_define(tv.dtype),),
                label=op.outputs[0] + (f"[{r0}:]" if len(chunks) > 1 else ""),
            )
        )
    return calls


def _matmul(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    w, x = op.inputs
    wv = p.values[w]
    n_out, n_in = wv.shape
    defines = (dtype_define(wv.dtype),) + reduce_defines(caps)
    # a batched decode step's rows (rows.batch_matvec): each weight unit read once for all of them
    xr = int(op.attrs.get("rows", 1))
    xrows = (n_out, n_in) if xr > 1 else ()
    defines += (("MV_XROWS", str(xr)),) if xr > 1 else ()
    # x as the planes made once a step (lowering/xplanes.py), bound after y
    planes = reads_planes(p, op, caps)
    defines += (("KW_XPLANES", "1"),) if planes else ()
    xp = ((planes_name(x), planes_bytes(xr, n_in, caps)),) if planes else ()
    chunks = row_chunks(wv.dtype, n_out, n_in, caps)
    calls = []
    for r0, rows in chunks:
        # several x rows take the units one row would, wide K-quant ones (split too: kwide_rows.glsl
        # loops over the x rows with the weight words held), with fewer rows a workgroup
        wg, rpw, wvec = matvec_shape(wv.dtype, n_in, rows, caps)
        rpw = batch_rows(rpw, xr, caps, wg)
        b = weight_bindings(w, wv.dtype, r0, None if len(chunks) == 1 else rows)
        b += (Binding(x), Binding(op.outputs[0])) + tuple(Binding(n) for n, _ in xp)
        calls.append(
            KernelCall(
                "matmul",
                (wg, n_in, rows, rpw) + xrows,
                b,
                (len(b) - 1 - len(xp),),
                flat_groups(-(-rows // rpw)),
                push=struct.pack("<I", r0),
                defines=defines + wvec_defines(wvec, caps, n_in, wv.dtype),
                scratch=xp,
                label=op.outputs[0] + (f"[{r0}:]" if len(chunks) > 1 else ""),
            )
        )
    return calls


# Accumulators (x rows x weight rows) a batched step's matvec invocation holds at most where the
# rows per workgroup are automatic (caps.batch_acc 0). matvec_shape picks them for one x row (q4_k
# split: 4, or 8 on rows past 4096 in floats); XR x rows hold XR * ROWS sums beside the ROWS rows'
# weight words (kwide_rows.glsl). Fewer rows mean more workgroups, each reading all XR rows of x
# for its ROWS weight rows; measured, the parallelism wins: H200, Llama-3.1-8B Q4_K_M, 8-row step
# 14.4 ms at 4 rows a workgroup (XR_ACC 32), 12.6 at 2, 21 at 8, 37 at 16 (caps.batch_rows; 4-row
# step 7.0 ms at 4 rows, 7.4 at 2), bench/results/nvidia-h200/2026-11-27-batch-rows/.
XR_ACC = 16


def batch_rows(rows: int, xr: int, caps: KernelCaps, wg: int) -> int:
    """Rows per workgroup of a matvec over xr rows of x (MV_XROWS) where matvec_shape chose `rows`
    for one: at most (caps.batch_acc or XR_ACC) // xr, unless caps.matvec_rows set them (lavapipe's
    16 rows a workgroup, kept as they were); caps.batch_rows (A/B) sets them, up to the workgroup's
    invocations (each stores one row) and to what its reduction's xr * rows * wg floats of shared
    memory allow (the 8B's q6_k down, 224 invocations, at 8 rows: 56 KiB lost the H200 device)."""
    if xr <= 1 or caps.matvec_rows:
        return rows
    if caps.batch_rows:
        return max(1, min(caps.batch_rows, wg, caps.max_shared // (4 * xr * wg)))
    return max(1, min(rows, (caps.batch_acc or XR_ACC) // xr))


def _elementwise(shader: str):
    def build(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
        n = p.values[op.outputs[0]].numel
        wg = wg_size(caps, n)
        b = tuple(Binding(v) for v in op.inputs + op.outputs)
        return [KernelCall(shader, (wg, n), b, (2,), flat_groups(-(-n // wg)), label=op.outputs[0])]

    return build


def _rms_norm(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    x, w = op.inputs
    n, d = p.values[x].numel, p.values[w].numel
    wg = wg_size(caps, d)
    b = (Binding(x), Binding(w), Binding(op.outputs[0]))
    return [
        KernelCall(
            "rms_norm",
            (wg, d, float(op.attrs["eps"])),
            b,
            (2,),
            flat_groups(n // d),
            defines=reduce_defines(caps),
            label=op.outputs[0],
        )
    ]


def _rope(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    a = op.attrs
    h, d = int(a["n_heads"]), int(a["head_dim"])
    wg = wg_size(caps, h * d // 2)
    b = (Binding(op.inputs[0]), Binding(op.inputs[1]), Binding(op.inputs[2]), Binding(op.outputs[0]))
    return [
        KernelCall(
            "rope",
            (wg, h, d),
            b,
            (3,),
            flat_groups(-(-(h * d // 2) // wg)),
            defines=(("NEOX", "1"),) if a["layout"] == "neox" else (),
            label=op.outputs[0],
        )
    ]


def _kv_write(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    row = p.values[op.outputs[0]].shape[1]
    n = row // 2 if kv_defines(p, op.outputs[0]) else row  # f16: one invocation per word
    wg = wg_size(caps, n)
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [
        KernelCall(
            "kv_write",
            (wg, row),
            b,
            (3, 4),
            flat_groups(-(-n // wg)),
            defines=kv_defines(p, op.outputs[0]),
            label=op.outputs[0],
        )
    ]


def _attention(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    q, kc, vc, step = op.inputs[:4]
    out = op.outputs[0]
    a = op.attrs
    h, kvh, d = int(a["n_heads"]), int(a["n_kv_heads"]), int(a["head_dim"])
    ctx = p.values[kc].shape[0]
    window = int(a.get("window", 0))
    s, maxchunk = attention_splits(min(ctx, window) if window else ctx, caps)  # rows it can see
    wg = wg_size(caps, 64, cap=128)
    rg = wg // d if wg >= d else 1
    shared = 4 * (d + maxchunk + rg * d + wg)
    if shared > caps.max_shared:
        raise ValueError(
            f"attention {out}: {shared} bytes of shared memory > {caps.max_shared}; lower attn_max_chunk"
        )
    spec = (wg, h, kvh, d, s, maxchunk, float(a["scale"]), window, 1)  # live splits at least 1
    defines = reduce_defines(caps) + ((("KVEC", "1"),) if d % 4 == 0 else ()) + kv_defines(p, kc)
    ins = (Binding(q), Binding(kc), Binding(vc), Binding(step))
    # gpt-oss's sinks (binding 5, after the output): split 0 folds them into its partials, so the
    # combine below is the plain one (shaders/attention.comp)
    sinks = tuple(Binding(v) for v in op.inputs[4:])
    defines += (("SINKS", "1"),) if sinks else ()
    if s == 1:
        return [
            KernelCall(
                "attention", spec, ins + (Binding(out),) + sinks, (4,), (1, h, 1), defines=defines, label=out
            )
        ]
    part, nbytes = partials(out, h, d, s)
    grid = AttnGrid(h, d, s, maxchunk, 1, window)
    return [
        KernelCall(
            "attention",
            spec,
            ins + (Binding(part),) + sinks,
            (4,),
            (s, h, 1),
            defines=defines + (("SPLIT", "1"),),
            scratch=((part, nbytes),),
            label=out + "[split]",
            live=grid,
        ),
        combine_call(out, step, grid, caps),
    ]


def _argmax(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    logits, out = op.inputs[0], op.outputs[0]
    n = p.values[logits].numel
    wg = wg_size(caps, 256)
    # about 256 partials at most, each workgroup scanning a whole number of wg-wide strides
    chunk = max(wg * 4, -(-n // 256 // wg) * wg)
    g = -(-n // chunk)
    part = f"scratch:{out}.argmax"
    defines = reduce_defines(caps)
    fwg = wg_size(caps, g)
    return [
        KernelCall(
            "argmax",
            (wg, n, chunk),
            (Binding(logits), Binding(part)),
            (1,),
            flat_groups(g),
            defines=defines,
            scratch=((part, g * 8),),
            label=out + "[partial]",
        ),
        KernelCall(
            "argmax",
            (fwg, g, 1),
            (Binding(part), Binding(out)),
            (1,),
            (1, 1, 1),
            defines=defines + (("FINAL", "1"),),
            scratch=((part, g * 8),),
            label=out + "[final]",
        ),
    ]


def _sample(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    # One workgroup: sampling reads the logits ~64 times (two radix selects) but runs once per token.
    # A batched step (fusion/chunk_batch.py) samples each row in a workgroup of its own.
    rows = int(op.attrs.get("rows", 1))
    n = p.values[op.inputs[0]].numel // rows
    wg = wg_size(caps, 1024, cap=256)
    b = (Binding(op.inputs[0]), Binding(op.inputs[1]), Binding(op.outputs[0]))
    defines = reduce_defines(caps) + ((("BATCH", "1"),) if op.attrs.get("batch") else ())
    return [KernelCall("sample", (wg, n), b, (2,), (rows, 1, 1), defines=defines, label=op.outputs[0])]


BUILDERS = {
    "embed": _embed,
    "rms_norm": _rms_norm,
    "matmul": _matmul,
    "add": _elementwise("add"),
    "rope": _rope,
    "kv_write": _kv_write,
    "attention": _attention,
    "silu_mul": _elementwise("silu_mul"),
    "gelu_mul": _elementwise("gelu_mul"),
    "argmax": _argmax,
    "sample": _sample,
    "moe_topk": moe.moe_topk,
    "moe_matmul": moe.moe_matmul,
    "moe_sum": moe.moe_sum,
    "sigmoid_scale": moe.sigmoid_scale,
    "moe_bias": moe.moe_bias,
    "swiglu_clamp": moe.swiglu_clamp,
    "conv1d_step": linear_attention.conv1d_step,
    "gated_delta_step": linear_attention.gated_delta_step,
}


def op_calls(program: Program, op_index: int, caps: KernelCaps) -> list[KernelCall]:
    """The kernel calls that run op #op_index, in order; a later call that reads what an earlier one
    wrote lists it among its bindings, and the executor puts a barrier between them."""
    op = program.ops[op_index]
    calls = row_op_calls(program, op, caps)
    if calls is None:
        try:
            build = BUILDERS[op.kind]
        except KeyError:
            raise ValueError(f"op #{op_index} {op.kind}: no kernel for this op kind") from None
        calls = build(program, op, caps)
    return with_planes(program, op_index, calls, caps)  # a batched step's x planes (caps.xplanes)

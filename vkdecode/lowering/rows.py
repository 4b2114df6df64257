"""Row-wise ops of a prompt chunk (fusion/chunk.py, attr rows=T) -> kernel calls.

ops.op_calls sends an op here when it carries rows > 1 (or an embed reads chunk token ids): the
matmul (its shapes in matmul_rows.py), the block causal attention, rope / kv_write at positions
step.pos + t, a bias add broadcast over rows and a per-row argmax. Like the decode calls, nothing
here depends on the chunk's position or tokens: the same calls are recorded once per chunk width
and replayed. The ops of a batched decode step (fusion/chunk_batch.py, attr batch) take the same
kernels with the define BATCH: each row reads its own step record and KV slot.
"""

from __future__ import annotations

import struct

from fusion.ir import Op, Program
from vkdecode.lowering.calls import (
    Binding,
    KernelCall,
    KernelCaps,
    dtype_define,
    flat_groups,
    kv_defines,
    reduce_defines,
    row_chunks,
    weight_bindings,
    wg_size,
)
from vkdecode.lowering.coop import ATTN_KNOWN_ATTRS, coop_attention_shape
from vkdecode.lowering.matmul_rows import matmul_calls


def batch_defines(op: Op) -> tuple:
    """The define of a batched decode step's op (fusion/chunk_batch.py): per-row step records."""
    return (("BATCH", "1"),) if op.attrs.get("batch") else ()


def _slot_rows(op: Op) -> tuple:
    """The spec constant SLOT_ROWS (KV rows per slot) of a batched step's cache op, else none."""
    return (int(op.attrs["slot_rows"]),) if op.attrs.get("batch") else ()


def _embed(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    table, ids = op.inputs
    tv = p.values[table]
    vocab, dim = tv.shape
    rows = int(op.attrs.get("rows", 1))
    wg = wg_size(caps, 256)
    chunks = row_chunks(tv.dtype, vocab, dim, caps)
    calls = []
    for r0, n in chunks:
        b = weight_bindings(table, tv.dtype, r0, None if len(chunks) == 1 else n)
        b += (Binding(ids), Binding(op.outputs[0]))
        spec = (wg, dim, n, rows, float(op.attrs.get("scale", 1.0)))
        calls.append(
            KernelCall(
                "embed_rows",
                spec,
                b,
                (len(b) - 1,),
                flat_groups(-(-rows * dim // wg)),
                push=struct.pack("<I", r0),
                defines=(dtype_define(tv.dtype),) + batch_defines(op),
                label=op.outputs[0],
            )
        )
    return calls


def _rope(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    a = op.attrs
    h, d, rows = int(a["n_heads"]), int(a["head_dim"]), int(a["rows"])
    n = rows * h * d // 2
    wg = wg_size(caps, n)
    b = tuple(Binding(v) for v in op.inputs + op.outputs)  # x, step[, freqs table], y
    defines = ((("NEOX", "1"),) if a["layout"] == "neox" else ()) + (
        (("FREQS", "1"),) if len(op.inputs) == 3 else ()
    )
    defines += batch_defines(op)
    return [
        KernelCall(
            "rope_rows",
            (wg, h, d, float(a.get("theta", 0.0)), rows),
            b,
            (len(b) - 1,),
            flat_groups(-(-n // wg)),
            defines=defines,
            label=op.outputs[0],
        )
    ]


def _kv_write(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    row = p.values[op.outputs[0]].shape[1]
    rows = int(op.attrs["rows"])
    if row % 2:
        raise ValueError(f"kv_write {op.outputs[0]}: cache rows of {row} (odd) have no word-pair form")
    wg = wg_size(caps, 256)
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [
        KernelCall(
            "kv_write_rows",
            (wg, row, rows) + _slot_rows(op),
            b,
            (3, 4),
            flat_groups(-(-rows * row // 2 // wg)),
            defines=kv_defines(p, op.outputs[0]) + batch_defines(op),
            label=op.outputs[0],
        )
    ]


GQA_BKV = 32  # keys per attention_rows_gqa tile


def gqa_rows(caps: KernelCaps, g: int, d: int, rows: int) -> int:
    """BQ, chunk rows per attention_rows_gqa workgroup (its G * BQ query vectors share each K/V tile
    load), or 0 (the per-row attention_rows). Auto: 16 rows or the chunk's (32 query vectors for Qwen3's G = 2),
    halved until the tiles fit the shared memory and the workgroup has an invocation per vector.
    Auto leaves chunks under caps.attn_gqa_rows rows (0: 17) to the per-row kernel: a narrow chunk
    is a handful of kv-head workgroups (H100, SmolLM2's 3 kv heads, a 9-row verify step at
    position 200: 5.51 ms of attention per step with this kernel, 1.10 ms per row)."""
    if caps.attn_rows_q < 0 or (caps.attn_rows_q == 0 and rows < (caps.attn_gqa_rows or 17)):
        return 0

    def fits(bq):
        return gqa_shared(g * bq, d) <= caps.max_shared and g * bq <= gqa_wg(caps, g * bq)

    bq = caps.attn_rows_q or min(16, rows)
    while bq > 1 and not fits(bq):
        bq //= 2
    return bq if fits(bq) else 0


def gqa_wg(caps: KernelCaps, qg: int) -> int:
    """attention_rows_gqa's workgroup: a power of two dividing QG * BKV (whole scores per invocation)."""
    qgk = qg * GQA_BKV
    return min(256, caps.max_invocations, qgk & -qgk)


def gqa_shared(qg: int, d: int) -> int:
    """Shared bytes of attention_rows_gqa: q vectors and a K/V tile (rows of d + 1), scores, factors."""
    return 4 * ((qg + GQA_BKV) * (d + 1) + qg * GQA_BKV + qg)


def _sinks(bindings: tuple, sinks: tuple) -> tuple:
    """gpt-oss's sinks (the attention op's optional input), bound right after `bindings`: the
    define SINKS and the binding B_SINKS (attention_rows.comp; attention_rows_gqa.comp binds 5)."""
    return (("SINKS", "1"), ("B_SINKS", str(len(bindings)))) if sinks else ()


def _attention(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    q, kc, vc, step = op.inputs[:4]
    a = op.attrs
    h, kvh, d, rows = int(a["n_heads"]), int(a["n_kv_heads"]), int(a["head_dim"]), int(a["rows"])
    b = (Binding(q), Binding(kc), Binding(vc), Binding(step), Binding(op.outputs[0]))
    sinks = tuple(Binding(v) for v in op.inputs[4:])
    sink_defines = _sinks(b, sinks)
    b += sinks
    # a batched step's rows are different sequences: no K/V tile is shared, the per-row kernel runs.
    batch = bool(a.get("batch"))
    coop = not batch and coop_attention_shape(caps, str(p.meta.get("arch", "")), a, bool(kv_defines(p, kc)))
    if coop:
        rb, bkv = coop
        spec = (32 * (h // kvh) * rb, h, kvh, d, rows, float(a["scale"]), rb, bkv, int(a.get("window", 0)))
        grid = (kvh, rows // (16 * rb), 1)
        return [
            KernelCall("attention_rows_coop", spec, b, (4,), grid, defines=sink_defines, label=op.outputs[0])
        ]
    bq = 0 if batch else gqa_rows(caps, h // kvh, d, rows)
    if bq:
        wg = gqa_wg(caps, h // kvh * bq)
        spec = (wg, h, kvh, d, rows, float(a["scale"]), int(a.get("window", 0)), bq, GQA_BKV)
        return [
            KernelCall(
                "attention_rows_gqa",
                spec,
                b,
                (4,),
                (kvh, -(-rows // bq), 1),
                defines=kv_defines(p, kc) + sink_defines,
                label=op.outputs[0],
            )
        ]
    spec = _rows_spec(caps, a, op.outputs[0])
    return [
        KernelCall(
            "attention_rows",
            spec,
            b,
            (4,),
            (h, rows, 1),
            defines=reduce_defines(caps) + kv_defines(p, kc) + batch_defines(op) + sink_defines,
            label=op.outputs[0],
        )
    ]


def _rows_spec(caps: KernelCaps, a: dict, label: str) -> tuple:
    """attention_rows' spec constants 0-7 for attention attrs a. Its workgroup on GPUs: 512 invocations (16 subgroups of keys in flight). H200,
    batched steps from position 256, Qwen3-0.6B F16 4 / 16 rows at 128, 256, 512: 1,145 / 3,360,
    1,394 / 3,853, 1,603 / 4,172 tok/s (bench/results/nvidia-h200/2026-11-27-attn-rows); CPUs keep
    head_dim's power of two."""
    h, kvh, d, rows = int(a["n_heads"]), int(a["n_kv_heads"]), int(a["head_dim"]), int(a["rows"])
    want = caps.attn_rows_wg or max(d, 64 if caps.device_cpu else 512)
    wg = wg_size(caps, want, cap=max(512, d, caps.attn_rows_wg))
    if wg < d:
        raise ValueError(f"attention {label}: head_dim {d} > workgroup size {wg}")
    slot_rows = (int(a["slot_rows"]),) if a.get("batch") else ()
    return (wg, h, kvh, d, rows, float(a["scale"]), int(a.get("window", 0))) + slot_rows


def fused_attention_rows(p: Program, region, caps: KernelCaps) -> list[KernelCall] | None:
    """A batched step's (q/k norm,) rope, KV write and attention as one attention_rows (FUSED): a
    workgroup per (head, row), as the op's own kernel, which builds its rows' q and current k, v
    itself (fusion.rules ..._ROWS), saving the rope_rows, kv_write_rows (and q/k rms_norm)
    dispatches of every layer. On GPUs unless caps.attn_rows_fused < 0 (CPUs: > 0 only). H200, same
    call, tok/s from position 256 at 4 / 8 / 16 rows: Llama-3.1-8B Q4_K_M 548 / 620 / 891 apart, 567 /
    628 / 896 fused; Qwen3-0.6B F16 4,073 -> 4,197-4,242 at 16 rows, 4 and 8 rows within the noise
    (bench/results/nvidia-h200/2026-11-27-attn-fused/)."""
    fused = caps.attn_rows_fused > 0 or (caps.attn_rows_fused == 0 and not caps.device_cpu)
    r, a = region.roles, region.attrs
    h, kvh, d = int(a["n_heads"]), int(a["n_kv_heads"]), int(a["head_dim"])
    known = ATTN_KNOWN_ATTRS | {"batch", "slot_rows", "layout", "eps"}  # others: the ops' own kernels
    if not fused or not a.get("batch") or d % 2 or h % kvh or set(a) - known:
        return None
    out, rows = r["out"], int(a["rows"])
    spec = _rows_spec(caps, a, out) + (float(a.get("eps", 0.0)),)
    b = tuple(Binding(r[k]) for k in ("q", "k_cache", "v_cache", "step", "out", "k", "v"))
    qk_norm = "q_norm_w" in r
    b += (Binding(r["q_norm_w"]), Binding(r["k_norm_w"])) if qk_norm else ()
    defines = reduce_defines(caps) + kv_defines(p, r["k_cache"]) + (("BATCH", "1"), ("FUSED", "1"))
    defines += ((("NEOX", "1"),) if a["layout"] == "neox" else ()) + ((("QK_NORM", "1"),) if qk_norm else ())
    defines += (("B_FREQ", str(len(b))),)
    b += (Binding(r["freqs"]),)
    sinks = (Binding(r["sinks"]),) if "sinks" in r else ()
    defines += _sinks(b, sinks)
    b += sinks
    return [KernelCall("attention_rows", spec, b, (1, 2, 4), (h, rows, 1), defines=defines, label=out)]


def _add(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    n, nb = p.values[op.outputs[0]].numel, p.values[op.inputs[1]].numel
    wg = wg_size(caps, n)
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [KernelCall("add_rows", (wg, n, nb), b, (2,), flat_groups(-(-n // wg)), label=op.outputs[0])]


def _argmax(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    rows = int(op.attrs["rows"])
    n = p.values[op.inputs[0]].numel // rows
    b = (Binding(op.inputs[0]), Binding(op.outputs[0]))
    return [KernelCall("argmax_rows", (wg_size(caps, 256), n), b, (1,), (rows, 1, 1), label=op.outputs[0])]


BUILDERS = {
    "embed": _embed,
    "matmul": matmul_calls,
    "rope": _rope,
    "kv_write": _kv_write,
    "attention": _attention,
    "argmax": _argmax,
}


def batch_matvec(program: Program, op: Op, caps: KernelCaps) -> bool:
    """Whether a batched step's matmul runs as the decode matvec over all its rows (MV_XROWS in
    shaders/matvec.glsl) instead of the chunk kernels: up to caps.batch_matvec rows (0: 8; < 0:
    never). The chunk kernels pay for tiles the few rows do not fill: lavapipe, SmolLM2 Q4_1, a
    4-row step's matmuls: 631 ms tiled, 154 ms by the matvec, 131 ms for one row; H200, one client
    on serve --parallel 64: Qwen3-0.6B F16 3.7 ms a token on the chunk kernels against 1.1 by the
    single-sequence step, Llama-3.1-8B Q4_K_M 27 ms (its 2- to 16-row steps 25-41 ms on the chunk
    kernels). A one-row step is the decode matvec itself; wider ones take the same units (wide
    K-quant ones decoded once for all x rows, kwide_rows.glsl KW_XROWS) with fewer rows a workgroup
    (ops.batch_rows). Up to 8 rows: XR * ROWS accumulators per invocation (ROWS 16 on CPUs) must
    stay compilable."""
    limit = caps.batch_matvec or 8
    return op.kind == "matmul" and bool(op.attrs.get("batch")) and 0 < int(op.attrs["rows"]) <= limit


def row_op_calls(program: Program, op: Op, caps: KernelCaps) -> list[KernelCall] | None:
    """The calls of a chunk op that differs from its decode form, or None (the decode kernel runs it
    as is: rms_norm, silu_mul and same-shape adds over the flat T-row vector)."""
    if op.kind == "add" and program.values[op.inputs[1]].numel != program.values[op.inputs[0]].numel:
        return _add(program, op, caps)
    if batch_matvec(program, op, caps):
        return None  # ops._matmul: the decode matvec with MV_XROWS
    rows = int(op.attrs.get("rows", 1))
    if op.kind in BUILDERS and (
        rows > 1 or op.attrs.get("batch") or (op.kind == "embed" and op.inputs[1] != "step")
    ):
        return BUILDERS[op.kind](program, op, caps)
    return None

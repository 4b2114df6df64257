"""Row-wise ops of a prompt chunk (fusion/chunk.py, attr rows=T) -> kernel calls.

kernels.op_calls sends an op here when it carries rows > 1 (or an embed reads chunk token ids):
the tiled matmul (shaders/matmul_rows.comp, weights decoded through dequant.glsl), the block
causal attention, rope / kv_write at positions step.pos + t, a bias add broadcast over rows and
a per-row argmax. Like the decode calls, nothing here depends on the chunk's position or tokens:
the same calls are recorded once per chunk width and replayed.
"""
from __future__ import annotations

import struct

from fusion.ir import Op, Program
from vkdecode.kernels import (
    MAX_GROUPS_X,
    Binding,
    KernelCall,
    KernelCaps,
    _dtype_define,
    _groups,
    _reduce_defines,
    _wbindings,
    _wg,
    kv_defines,
    row_chunks,
)

MATMUL_BM = 64      # weight rows per workgroup (shaders/matmul_rows.comp BM)
NARROW_OUTPUTS = 64  # outputs (weight rows x BN) per matmul_rows_narrow workgroup = its size
# dtypes dequant.glsl's unit_weights decodes a unit at a time; any other dtype it reads through
# dequant_elem, an element at a time (correct for every dtype dequant.glsl knows, only slower)
UNIT_DTYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0")


def _embed(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    table, ids = op.inputs
    tv = p.values[table]
    vocab, dim = tv.shape
    rows = int(op.attrs.get("rows", 1))
    wg = _wg(caps, 256)
    chunks = row_chunks(tv.dtype, vocab, dim, caps)
    calls = []
    for r0, n in chunks:
        b = _wbindings(table, tv.dtype, r0, None if len(chunks) == 1 else n)
        b += (Binding(ids), Binding(op.outputs[0]))
        spec = (wg, dim, n, rows, float(op.attrs.get("scale", 1.0)))
        calls.append(KernelCall("embed_rows", spec, b, (len(b) - 1,),
                                _groups(-(-rows * dim // wg)), push=struct.pack("<I", r0),
                                defines=(_dtype_define(tv.dtype),), label=op.outputs[0]))
    return calls


def matmul_tile_rows(rows: int) -> int:
    """BN, chunk rows per matmul tile: the chunk's width up to 64 (a power of two >= 4)."""
    bn = 4
    while bn < min(rows, 64):
        bn *= 2
    return bn


def _narrow_rows(caps: KernelCaps, bn: int) -> int:
    """Weight rows per matmul_rows_narrow workgroup for a chunk of tile width bn, or 0 (tiled
    matmul_rows): a chunk no wider than caps.matmul_narrow (0: 16) on a device whose limits hold a
    64-invocation workgroup and its 64 x 65 floats of partial sums."""
    limit = 16 if caps.matmul_narrow == 0 else caps.matmul_narrow
    fits = caps.max_invocations >= NARROW_OUTPUTS and caps.max_shared >= 4 * NARROW_OUTPUTS * (NARROW_OUTPUTS + 1)
    return NARROW_OUTPUTS // bn if bn <= min(limit, 16) and fits else 0


def _matmul(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    w, x = op.inputs
    wv = p.values[w]
    n_out, n_in = wv.shape
    rows = int(op.attrs.get("rows", 1))
    bn = matmul_tile_rows(rows)
    wg = (MATMUL_BM // 8) * (bn // 4)      # 8 x 4 outputs per invocation
    chunks = row_chunks(wv.dtype, n_out, n_in, caps)
    defines = (_dtype_define(wv.dtype),)
    if n_in % 32 == 0 and wv.dtype in UNIT_DTYPES:   # whole 32-wide k tiles: a unit at a time
        defines += (("UNITS", "1"),) + ((("WVEC", "1"),) if wv.dtype in ("f32", "f16") else ())
    narrow = _narrow_rows(caps, bn)
    calls = []
    for r0, n in chunks:
        b = _wbindings(w, wv.dtype, r0, None if len(chunks) == 1 else n)
        b += (Binding(x), Binding(op.outputs[0]))
        if narrow and -(-n // narrow) <= MAX_GROUPS_X:
            kernel, spec = "matmul_rows_narrow", (NARROW_OUTPUTS, n_in, n, rows, n_out, bn, narrow)
            grid = (-(-n // narrow), 1, 1)
            call_defines = defines + _reduce_defines(caps)
        else:
            kernel, spec = "matmul_rows", (wg, n_in, n, rows, n_out, bn)
            grid = (-(-n // MATMUL_BM), -(-rows // bn), 1)
            call_defines = defines
        calls.append(KernelCall(kernel, spec, b, (len(b) - 1,), grid, push=struct.pack("<I", r0),
                                defines=call_defines,
                                label=op.outputs[0] + (f"[{r0}:]" if len(chunks) > 1 else "")))
    return calls


def _rope(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    a = op.attrs
    h, d, rows = int(a["n_heads"]), int(a["head_dim"]), int(a["rows"])
    n = rows * h * d // 2
    wg = _wg(caps, n)
    b = tuple(Binding(v) for v in op.inputs + op.outputs)     # x, step[, freqs table], y
    defines = ((("NEOX", "1"),) if a["layout"] == "neox" else ()) + ((("FREQS", "1"),) if len(op.inputs) == 3 else ())
    return [KernelCall("rope_rows", (wg, h, d, float(a.get("theta", 0.0)), rows), b, (len(b) - 1,),
                       _groups(-(-n // wg)), defines=defines, label=op.outputs[0])]


def _kv_write(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    row = p.values[op.outputs[0]].shape[1]
    rows = int(op.attrs["rows"])
    if row % 2:
        raise ValueError(f"kv_write {op.outputs[0]}: cache rows of {row} (odd) have no word-pair form")
    wg = _wg(caps, 256)
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [KernelCall("kv_write_rows", (wg, row, rows), b, (3, 4), _groups(-(-rows * row // 2 // wg)),
                       defines=kv_defines(p, op.outputs[0]), label=op.outputs[0])]


def _attention_tile(caps: KernelCaps, d: int) -> tuple[int, int] | None:
    """(BQ query rows, BK keys) per workgroup of attention_rows_tiled.comp that fit the device's
    shared memory, or None (attention_rows.comp)."""
    if caps.attn_rows_tiled < 0 or caps.max_invocations < 256:
        return None
    for bq, bk in ((16, 32), (16, 16), (8, 16)):
        if 4 * (bq * d + bk * (d + 1) + bk * d + bq * bk + 3 * bq) <= caps.max_shared:
            return bq, bk
    return None


def _attention(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    q, kc, vc, step = op.inputs
    a = op.attrs
    h, kvh, d, rows = int(a["n_heads"]), int(a["n_kv_heads"]), int(a["head_dim"]), int(a["rows"])
    b = (Binding(q), Binding(kc), Binding(vc), Binding(step), Binding(op.outputs[0]))
    spec = (h, kvh, d, rows, float(a["scale"]), int(a.get("window", 0)))
    tile = _attention_tile(caps, d)
    if tile is not None:
        bq, bk = tile
        return [KernelCall("attention_rows_tiled", (256,) + spec + (bq, bk), b, (4,), (h, -(-rows // bq), 1),
                           defines=kv_defines(p, kc), label=op.outputs[0])]
    wg = _wg(caps, max(d, 64), cap=max(256, d))
    if wg < d:
        raise ValueError(f"attention {op.outputs[0]}: head_dim {d} > workgroup size {wg}")
    return [KernelCall("attention_rows", (wg,) + spec, b, (4,), (h, rows, 1),
                       defines=_reduce_defines(caps) + kv_defines(p, kc), label=op.outputs[0])]


def _add(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    n, nb = p.values[op.outputs[0]].numel, p.values[op.inputs[1]].numel
    wg = _wg(caps, n)
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [KernelCall("add_rows", (wg, n, nb), b, (2,), _groups(-(-n // wg)), label=op.outputs[0])]


def _argmax(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    rows = int(op.attrs["rows"])
    n = p.values[op.inputs[0]].numel // rows
    b = (Binding(op.inputs[0]), Binding(op.outputs[0]))
    return [KernelCall("argmax_rows", (_wg(caps, 256), n), b, (1,), (rows, 1, 1), label=op.outputs[0])]


BUILDERS = {"embed": _embed, "matmul": _matmul, "rope": _rope, "kv_write": _kv_write,
            "attention": _attention, "argmax": _argmax}


def row_op_calls(program: Program, op: Op, caps: KernelCaps) -> list[KernelCall] | None:
    """The calls of a chunk op that differs from its decode form, or None (the decode kernel runs it
    as is: rms_norm, silu_mul and same-shape adds over the flat T-row vector)."""
    if op.kind == "add" and program.values[op.inputs[1]].numel != program.values[op.inputs[0]].numel:
        return _add(program, op, caps)
    rows = int(op.attrs.get("rows", 1))
    if op.kind in BUILDERS and (rows > 1 or (op.kind == "embed" and op.inputs[1] != "step")):
        return BUILDERS[op.kind](program, op, caps)
    return None

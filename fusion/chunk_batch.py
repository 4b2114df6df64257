"""A batched decode step as a Program: the decode step's op list widened to B rows, where row b is
one step of its own sequence (unlike a prompt chunk, whose rows are consecutive positions of one).

Each row reads its own record of the batch step buffer (BATCH_STEP, u32[B * STEP_WORDS]): the step
buffer's layout (token, position, sampling seed / temperature / top-k / top-p) plus the KV slot the
row uses (STEP_SLOT) and whether the GPU feeds it its next token (STEP_LIVE). The KV caches hold
`slots` fixed slots of ctx rows each: slot s is cache rows s*ctx .. s*ctx + ctx - 1; then `slots`
rows more, for padding rows (a step of width B with fewer live sequences): they run as slot
`slots` at positions 0, 1, ..., so each reads only rows the same step wrote.

Why fixed slots and not paged blocks: a row's cache is one base offset (slot * ctx) the kernels add,
so the existing row kernels serve a batch with a define, with no page table to keep on the GPU and
none to look up per key; a slot is given back whole when its sequence ends, so there is no
fragmentation to manage. The price is memory: every slot reserves ctx rows, however short its
sequence. Paged blocks would let many short sequences share that memory; the three kernels that
address the cache (kv_write_rows, attention_rows, and rope only through the position) are where a
page lookup would go.

Recurrent states (Qwen3.5's linear attention, fusion/chunk.py RECURRENT_KINDS) are one whole state a
sequence, not rows of ctx: they get `slots` + 1 copies, one a slot and one the padding rows share
(padding rows' outputs are never read, so their racing on it is harmless). The rows of a batched
recurrent op are independent sequences, so a kernel runs them side by side (a prompt chunk's rows,
consecutive positions of one sequence, run in order); each row starts afresh at its position 0.

Row semantics (attr rows=B, batch=True, slot_rows=ctx; rec_b = BATCH_STEP[b * STEP_WORDS ...]):
  embed      (table, BATCH_STEP)          -> x[B*dim]  row b = table[rec_b.token]
  rope       (x, BATCH_STEP, freqs)       -> y         row b at position rec_b.pos
  kv_write   (k, v, BATCH_STEP)           -> caches    cache row rec_b.slot * ctx + rec_b.pos := row b
  attention  (q, k_cache, v_cache, BATCH_STEP) -> o    row b over its slot's rows lo .. rec_b.pos
  conv1d_step, gated_delta_step (..., BATCH_STEP) -> y, state   row b at rec_b.pos on state copy
             rec_b.slot (state[(slots + 1) * n], copy s at s * n); attr batch only (no slot_rows)
  argmax     (logits[B*vocab])            -> token[B]  per row
  sample     (logits[B*vocab], BATCH_STEP) -> token[B] per row, with rec_b's parameters and position
  matmul, add, rms_norm, silu_mul, gelu_mul: as in fusion/chunk.py (rows are independent there).
"""

from __future__ import annotations

from fusion.chunk import FLAT_KINDS, RECURRENT_KINDS, ChunkError, kv_caches, recurrent_states
from fusion.ir import STEP_WORDS, Program

BATCH_STEP = "batch_step"
# u32[2 * rows]: each live row's token by the parity of its position (shaders/advance_rows.comp), so
# a step's tokens survive the next step in flight (executors/batch_ahead.py)
BATCH_RING = "batch_ring"
# ops that read the step (a record per row), and matmuls (attr batch: their rows are independent
# sequences, so a kernel may take them as several vectors rather than as a matrix)
BATCH_KINDS = {"embed", "rope", "kv_write", "attention", "sample", "matmul"}
ROW_KINDS = {"argmax"}


def batch_program(decode: Program, rows: int, slots: int) -> Program:
    """The decode Program as one step of `rows` sequences over KV caches of `slots` slots."""
    if rows < 1 or slots < rows:
        raise ChunkError(f"a batch of {rows} rows needs 1 <= rows <= slots, not {slots} slots")
    recurrent, caches = recurrent_states(decode), kv_caches(decode)
    # a slot's KV rows; none where every layer is recurrent (a Qwen3.5 cut to its first layers)
    ctx = caches[0].shape[0] if caches else 1
    p = Program(f"{decode.name}_batch{rows}")
    p.meta.update(decode.meta, batch_rows=rows, slots=slots, slot_rows=ctx)
    for v in decode.values.values():
        if v.name == "step":
            p.value(BATCH_STEP, (rows * STEP_WORDS,), "u32", "step")
        elif v.kind in ("activation", "output"):
            p.value(v.name, (v.numel * rows,), v.dtype, v.kind)
        elif v.name in recurrent:
            p.value(v.name, ((slots + 1) * v.numel,), v.dtype, v.kind)
        elif v.kind == "state":
            p.value(v.name, (slots * v.shape[0] + slots,) + v.shape[1:], v.dtype, v.kind)
        else:
            p.value(v.name, v.shape, v.dtype, v.kind)
    p.value(BATCH_RING, (2 * rows,), "u32", "output")
    p.constants = dict(getattr(decode, "constants", {}) or {})
    for i, op in enumerate(decode.ops):
        ins = [BATCH_STEP if n == "step" else n for n in op.inputs]
        if op.kind in BATCH_KINDS:
            p.op(op.kind, ins, op.outputs, **op.attrs, rows=rows, batch=True, slot_rows=ctx)
        elif op.kind in RECURRENT_KINDS:
            p.op(op.kind, ins, op.outputs, **op.attrs, rows=rows, batch=True)
        elif op.kind in ROW_KINDS:
            p.op(op.kind, ins, op.outputs, **op.attrs, rows=rows)
        elif op.kind in FLAT_KINDS:
            p.op(op.kind, ins, op.outputs, **op.attrs)
        else:
            raise ChunkError(f"op #{i} {op.kind}: no row-wise form for a batched step")
    return p.verify()

"""A prompt chunk of T tokens as a Program: the decode step's op list with every activation
widened to T rows, so prompt tokens run as matrix-matrix work.

Why a transform of the decode Program instead of a second Builder: every family (and every op a
family adds later) is lowered once, by its own builder, and the chunk follows automatically; an op
kind this module does not know is refused (ChunkError), never guessed.

Row semantics (attr rows=T; the flat activation x[T*n] is row-major [T, n]):
  embed      (table, chunk_tokens[T])    -> x[T*dim]   row t = table[chunk_tokens[t]]
  matmul     (w[out, in], x[T*in])       -> y[T*out]   row t = w @ x_t
  rope       (x, step)                   -> y          row t at position step.pos + t
  kv_write   (k, v, step)                -> caches     rows step.pos .. step.pos + T - 1
  attention  (q, k_cache, v_cache, step[, sinks]) -> o  row t causal over 0 .. step.pos + t
  add        (a[T*n], b[T*n] or b[n])    -> c[T*n]     a weight b (a bias) is added to every row
  argmax     (logits[T*vocab])           -> token[T]   per row (the speculative verify step)
  rms_norm, silu_mul, moe_*: unchanged (per head / per element / per slot over the flat vector).

Two tails (what the chunk is for):
  kv   (prefill) the chunk only fills the KV cache: ops that feed no cache are dropped (the last
       layer's attention output and FFN, the final norm, the lm_head). The prompt's last token then
       runs through the decode step itself, so the first new token comes from exactly the kernels
       (and, with sampling, the RNG position) of the token-by-token path.
  all  (verify) every row gets logits and its argmax: T tokens checked in one step.
"""

from __future__ import annotations

from fusion.ir import Program

ROW_KINDS = {"embed", "matmul", "rope", "kv_write", "attention", "argmax"}
# the MoE ops are shape-generic: a chunk's T rows are T times the slots (fusion/ir.py)
FLAT_KINDS = {"rms_norm", "silu_mul", "gelu_mul", "add", "moe_topk", "moe_matmul", "moe_sum", "sigmoid_scale"}
FLAT_KINDS |= {"moe_bias", "swiglu_clamp"}  # gpt-oss's expert biases and GLU
TOKENS = "chunk_tokens"
# ops that carry a recurrent state from one position to the next (Qwen3.5's linear attention): a
# prompt chunk runs their rows in order (rows = T, like the row kinds), and keeps them for the state
# they write as it keeps kv_write for its caches; a batched step gives each slot a copy of the state
# (fusion/chunk_batch.py); a verify step runs them like a prompt chunk, and the speculative executor
# sets the states back where drafts were rejected (executors/speculative.py)
RECURRENT_KINDS = {"conv1d_step", "gated_delta_step"}


def has_recurrent_state(program: Program) -> bool:
    return any(op.kind in RECURRENT_KINDS for op in program.ops)


def recurrent_states(program: Program) -> set[str]:
    """The state values the recurrent ops carry (a whole state a sequence, unlike a KV cache's rows)."""
    return {n for op in program.ops if op.kind in RECURRENT_KINDS for n in op.outputs[1:]}


def kv_caches(program: Program) -> list:
    """The state values that are KV caches: rows of ctx (the first one's rows are the context)."""
    recurrent = recurrent_states(program)
    return [v for v in program.values.values() if v.kind == "state" and v.name not in recurrent]


class ChunkError(ValueError):
    """The decode program has an op a chunk cannot run row by row."""


def chunk_program(decode: Program, rows: int, tail: str = "kv") -> Program:
    if rows < 1:
        raise ChunkError(f"chunk width must be >= 1, not {rows}")
    if tail not in ("kv", "all"):
        raise ChunkError(f"tail must be 'kv' or 'all', not {tail!r}")
    ops = _live_ops(decode, tail)
    p = Program(f"{decode.name}_chunk{rows}_{tail}")
    p.meta.update(decode.meta, chunk_rows=rows, chunk_tail=tail)
    used = {n for i in ops for n in decode.ops[i].inputs + decode.ops[i].outputs}
    for v in decode.values.values():
        if v.name not in used:
            continue
        if v.kind in ("activation", "output"):
            p.value(v.name, (v.numel * rows,), v.dtype, v.kind)
        else:
            p.value(v.name, v.shape, v.dtype, v.kind)
    p.value(TOKENS, (rows,), "u32", "step")
    consts = getattr(decode, "constants", None)  # builder-computed weights (rope tables)
    if consts:
        p.constants = {n: a for n, a in consts.items() if n in p.values}
    for i in ops:
        op = decode.ops[i]
        if op.kind in FLAT_KINDS:
            p.op(op.kind, op.inputs, op.outputs, **op.attrs)
        elif op.kind in ROW_KINDS or op.kind in RECURRENT_KINDS:
            ins = [TOKENS if op.kind == "embed" and n == "step" else n for n in op.inputs]
            p.op(op.kind, ins, op.outputs, **op.attrs, rows=rows)
        else:
            raise ChunkError(f"op #{i} {op.kind}: no row-wise form for a prompt chunk")
    return p.verify()


def _live_ops(p: Program, tail: str) -> list[int]:
    """Indices of the ops the chunk keeps: all of them (tail 'all', which must end in argmax), or
    those the KV caches depend on (tail 'kv')."""
    if tail == "all":
        if any(o.kind == "sample" for o in p.ops):
            raise ChunkError("the verify step is greedy: this program ends in the sampler")
        return list(range(len(p.ops)))
    need: set[str] = set()
    keep: list[int] = []
    for i in range(len(p.ops) - 1, -1, -1):
        op = p.ops[i]
        if op.kind == "kv_write" or op.kind in RECURRENT_KINDS or any(o in need for o in op.outputs):
            keep.append(i)
            need.update(op.inputs)
    return keep[::-1]

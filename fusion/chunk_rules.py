"""Fusion rules of a prompt chunk / speculative verify step (fusion/chunk.py, attr rows=T), derived
from the decode rules: the same patterns and roles, region names suffixed _ROWS.

A chunk's rms_norm normalises each of its T rows (x[T*n], w[n]), so the decode predicate
whole_norm (w as long as x) is replaced by row_norm, and the check adds that the norm weight is
one row of every projection's input. Only the projection rules are derived (norm -> q/k/v,
norm -> gate/up -> SwiGLU/GeGLU, projection -> residual add): their fused kernels
(vkdecode/kernels_rows_fused.py) are the narrow chunk matmul with the norm, the GLU or the add done
in its workgroups; attention, rope and kv_write stay one kernel per op.
"""

from __future__ import annotations

from dataclasses import replace

from fusion.ir import Program
from fusion.pattern import Match, OpPat, Pattern, Repeat
from fusion.rules import (
    MATMUL_ADD,
    MATMUL_BIAS_ADD,
    MATMUL_GELU_MUL,
    MATMUL_SILU_MUL,
    RMS_NORM_MATMUL,
    RMS_NORM_MATMUL_BIAS_SILU_MUL,
    RMS_NORM_MATMUL_GELU_MUL,
    RMS_NORM_MATMUL_SILU_MUL,
    Rule,
    whole_norm,
)

SUFFIX = "_ROWS"


def row_norm(o, p: Program) -> bool:
    """rms_norm over whole chunk rows: x holds chunk_rows rows of the weight's length."""
    rows = int(p.meta.get("chunk_rows", 1))
    return p.values[o.inputs[0]].numel == rows * p.values[o.inputs[1]].numel


def _weights(m: Match) -> list[str]:
    c = m.captures
    ws = c.get("w")
    ws = list(ws) if isinstance(ws, list) else ([ws] if ws else [])
    return ws + [c[n] for n in ("w_gate", "w_up") if c.get(n)]


def _rows_check(m: Match, p: Program) -> bool:
    """Every projection is a row op of the chunk's width; a norm weight is one row of its input."""
    rows = int(p.meta.get("chunk_rows", 0))
    if rows < 1 or any(
        int(p.ops[i].attrs.get("rows", 0)) != rows for i in m.ops if p.ops[i].kind == "matmul"
    ):
        return False
    nw = m.captures.get("norm_w")
    return nw is None or all(p.values[w].shape[1] == p.values[nw].shape[0] for w in _weights(m))


def _item(it):
    if isinstance(it, Repeat):
        return replace(it, items=tuple(_item(x) for x in it.items))
    return replace(it, where=row_norm) if isinstance(it, OpPat) and it.where is whole_norm else it


def rows_rule(rule: Rule) -> Rule:
    """The chunk form of a decode projection rule."""
    name = rule.name + SUFFIX
    pat = Pattern(name, tuple(_item(it) for it in rule.pattern.items), rule.pattern.exports)

    def check(m: Match, p: Program) -> bool:
        return _rows_check(m, p) and (rule.check is None or rule.check(m, p))

    # the decode rule's lowering names the region after the (suffixed) pattern
    return Rule(name, pat, rule.lower, check)


# decode priority order: the norm goes into gate/up (+ GLU) first, else into every projection
ROW_RULES: tuple[Rule, ...] = tuple(
    rows_rule(r)
    for r in (
        RMS_NORM_MATMUL_SILU_MUL,
        RMS_NORM_MATMUL_BIAS_SILU_MUL,
        RMS_NORM_MATMUL_GELU_MUL,
        RMS_NORM_MATMUL,
        MATMUL_BIAS_ADD,
        MATMUL_ADD,
        MATMUL_SILU_MUL,
        MATMUL_GELU_MUL,
    )
)

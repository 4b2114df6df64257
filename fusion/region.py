"""What a rule is (Rule, and rule() that writes its name once), what it lowers a match to (Region),
and the predicates and capture readers the rules of rules.py and rules_projection.py share.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fusion.ir import Program
from fusion.pattern import Match, Pattern, pattern


@dataclass
class Region:
    name: str
    rule: str | None  # None: a single unmatched op
    ops: list[int]  # indices into program.ops, program order
    inputs: list[str]  # values read and not produced inside (weights and step included)
    outputs: list[str]  # values produced inside and visible outside (+ written state)
    roles: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: Pattern
    lower: Callable[[Match, Program], Region | None]
    check: Callable[[Match, Program], bool] | None = None


def single_op_region(program: Program, i: int) -> Region:
    o = program.ops[i]
    return Region(
        o.kind.upper(),
        None,
        [i],
        list(dict.fromkeys(o.inputs)),
        list(o.outputs),
        {"inputs": list(o.inputs), "outputs": list(o.outputs)},
        dict(o.attrs),
    )


def match_region(m: Match, roles: dict, attrs: dict) -> Region:
    """The region of a match, named after its rule (a pattern carries its rule's name)."""
    return Region(m.pattern, m.pattern, list(m.ops), list(m.inputs), list(m.exports), roles, attrs)


def rule(name: str, *items, lower, exports=(), check=None) -> Rule:
    """A rule, its name written once: the pattern and every region it lowers to carry it."""
    return Rule(name, pattern(name, *items, exports=exports), lower, check)


# -- predicates --


def shape_of(p: Program, name: str):
    return p.values[name].shape


def whole_norm(o, p: Program) -> bool:
    """rms_norm over the whole vector (weight as long as x): the form a matvec can fold in."""
    return shape_of(p, o.inputs[1])[0] == shape_of(p, o.inputs[0])[0]


def row_norm(o, p: Program) -> bool:
    """rms_norm over each of a batched step's rows (x several weight lengths long; fusion/chunk_batch.py)."""
    x, w = shape_of(p, o.inputs[0])[0], shape_of(p, o.inputs[1])[0]
    return x % w == 0 and bool(p.meta.get("batch_rows"))


def chunk_norm(o, p: Program) -> bool:
    """rms_norm over each row of a prompt chunk (fusion/chunk.py: program.meta chunk_rows)."""
    x, w = shape_of(p, o.inputs[0])[0], shape_of(p, o.inputs[1])[0]
    return x % w == 0 and "chunk_rows" in p.meta


def same_weights(m: Match, p: Program, a: str, b: str) -> bool:
    wa, wb = p.values[m.captures[a]], p.values[m.captures[b]]
    return wa.dtype == wb.dtype and wa.shape == wb.shape


def eps_of(m: Match, p: Program, out: str) -> float:
    return p.ops[p.producers()[m.captures[out]]].attrs["eps"]


def op_attrs(m: Match, p: Program, out: str) -> dict:
    return dict(p.ops[p.producers()[m.captures[out]]].attrs)

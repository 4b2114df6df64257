"""A small declarative pattern language over a Program's data flow, and the one legality predicate.

A Pattern is a sequence of items:
  op(kind, inputs, outputs, attrs=..., where=..., kinds=..., commutative=..., optional_inputs=...)
      matches one op of that kind; `inputs` / `outputs` are capture names ("_" matches anything);
      `optional_inputs` name trailing inputs the op may leave out (attention's sinks: unbound then).
      A capture bound once must name the same value everywhere in the pattern (unification).
      `attrs` maps attr -> expected value or predicate; `where(op, program)` tests the op;
      `kinds` maps capture -> allowed value kind(s); `commutative` also tries the two inputs swapped.
  optional(op(...))   the op may be absent (its captures are then unbound / None).
  repeat(item, ..., min=1, max=None, exports=...)
      one or more iterations of a group. Names bound before the group unify with it; names first
      bound inside an iteration are local to it and come back as lists (None where unbound).
Matching is anchored: the first item is an op and must match the anchor op. Every later op is found
by following data flow from captured values: the producer of a bound output, else the consumers of a
bound input (so order items along the data flow). Only ops not yet claimed are considered. Search
backtracks; repeats are greedy (most iterations first), optional ops are tried present first.

Exports are declared by the pattern: a name, or a tuple of alternatives of which the first bound one
is exported (e.g. ("yb", "y"): the bias add's output if the optional add matched, else the matmul's).

Legality (`why_illegal`, the ONE predicate every rule goes through; None means legal):
  1. no matched op is already claimed by another region (matches never overlap);
  2. every value produced inside the match and not exported has all its consumers inside the match
     and is not a program output (kind "output"); exported values may be read outside;
  3. the match is schedulable as one unit: no op outside it lies on a data path between two of its
     ops (an outside op that reads a match output and, directly or through other outside ops, feeds
     a match op). Claimed regions count as units here: reaching any op of a region reaches all of
     its outputs, so two regions can never wait on each other;
  4. the rule's optional check(match, program) accepts (e.g. equal weight dtypes, matching shapes).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from fusion.ir import Program

WILD = "_"


class PatternError(ValueError):
    """A malformed pattern (e.g. an op not reachable from the captures bound before it)."""


@dataclass(frozen=True)
class OpPat:
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple = ()  # ((attr, value-or-predicate), ...), hashable
    where: Callable | None = None
    kinds: tuple = ()  # ((capture, kinds-tuple), ...)
    commutative: bool = False
    optional: bool = False
    optional_inputs: tuple[str, ...] = ()  # trailing inputs the op may leave out


@dataclass(frozen=True)
class Repeat:
    items: tuple[OpPat, ...]
    min: int = 1
    max: int | None = None
    exports: tuple = ()


@dataclass(frozen=True)
class Pattern:
    name: str
    items: tuple
    exports: tuple = ()

    def __post_init__(self):
        first = self.items[0] if self.items else None
        if not isinstance(first, OpPat) or first.optional:
            raise PatternError(f"pattern {self.name}: the first item must be a required op (the anchor)")


def op(
    kind, inputs, outputs, *, attrs=None, where=None, kinds=None, commutative=False, optional_inputs=()
) -> OpPat:
    kinds = {k: (v,) if isinstance(v, str) else tuple(v) for k, v in (kinds or {}).items()}
    return OpPat(
        kind,
        tuple(inputs),
        tuple(outputs),
        tuple((attrs or {}).items()),
        where,
        tuple(kinds.items()),
        commutative,
        optional_inputs=tuple(optional_inputs),
    )


def optional(p: OpPat) -> OpPat:
    return replace(p, optional=True)


def repeat(*items: OpPat, min: int = 1, max: int | None = None, exports=()) -> Repeat:
    if not items or items[0].optional:
        raise PatternError("a repeated group starts with a required op")
    return Repeat(tuple(items), min, max, tuple(exports))


def pattern(name: str, *items, exports=()) -> Pattern:
    return Pattern(name, tuple(items), tuple(exports))


class Graph:
    """A Program plus its producer / consumer maps, built once per partition."""

    def __init__(self, program: Program):
        self.program = program
        self.ops = program.ops
        self.producer = program.producers()
        self.consumers: dict[str, list[int]] = {
            v: sorted(set(users)) for v, users in program.consumers().items()
        }


@dataclass
class Match:
    pattern: str
    anchor: int
    ops: list[int]  # program order
    captures: dict  # name -> value name | None | list (repeated groups)
    exports: list[str]
    inputs: list[str] = field(default_factory=list)  # read, not produced inside; first-use order

    def produced(self, g: Graph) -> list[str]:
        return [v for i in self.ops for v in g.ops[i].outputs]


# -- matching --


def _unify(env: dict, names, values) -> dict | None:
    new = None
    for n, v in zip(names, values):
        if n == WILD:
            continue
        bound = (new or env).get(n)
        if bound is None:
            new = dict(new or env)
            new[n] = v
        elif bound != v:
            return None
    return new if new is not None else env


def _candidates(g: Graph, p: OpPat, env: dict) -> list[int]:
    for n in p.outputs:
        if n in env:
            i = g.producer.get(env[n])
            return [] if i is None else [i]
    bound = [env[n] for n in p.inputs if n != WILD and n in env]
    if not bound:
        raise PatternError(f"{p.kind}{p.inputs}: no captured value leads to it; order items by data flow")
    # the step value has a consumer in every layer: start from the rarest value
    return g.consumers.get(min(bound, key=lambda v: len(g.consumers.get(v, ()))), [])


def _op_ok(g: Graph, p: OpPat, i: int) -> bool:
    o = g.ops[i]
    n_in = len(p.inputs)
    if o.kind != p.kind or not n_in <= len(o.inputs) <= n_in + len(p.optional_inputs):
        return False
    if len(o.outputs) != len(p.outputs):
        return False
    for k, want in p.attrs:
        if k not in o.attrs:
            return False
        if not (want(o.attrs[k]) if callable(want) else o.attrs[k] == want):
            return False
    return p.where is None or bool(p.where(o, g.program))


def _match_op(g, p: OpPat, env, used, claimed, candidates=None) -> Iterator[tuple[dict, frozenset]]:
    for i in candidates if candidates is not None else _candidates(g, p, env):
        if i in used or i in claimed or not _op_ok(g, p, i):
            continue
        o = g.ops[i]
        orders = [o.inputs]
        if p.commutative and len(o.inputs) == 2 and o.inputs[0] != o.inputs[1]:
            orders.append(o.inputs[::-1])
        names = p.inputs + p.optional_inputs[: len(o.inputs) - len(p.inputs)]  # those the op has
        for ins in orders:
            e = _unify(env, names, ins)
            e = e if e is None else _unify(e, p.outputs, o.outputs)
            if e is None:
                continue
            if any(n in e and g.program.values[e[n]].kind not in ks for n, ks in p.kinds):
                continue
            yield e, used | {i}


def _match_seq(g, items, k, env, used, claimed) -> Iterator[tuple[dict, frozenset]]:
    if k == len(items):
        yield env, used
        return
    it = items[k]
    if isinstance(it, Repeat):
        for e, u, iters in _match_repeat(g, it, env, used, claimed, []):
            e = dict(e)
            e[("#rep", k)] = iters
            yield from _match_seq(g, items, k + 1, e, u, claimed)
        return
    yield from (
        (e, u2)
        for e1, u1 in _match_op(g, it, env, used, claimed)
        for e, u2 in _match_seq(g, items, k + 1, e1, u1, claimed)
    )
    if it.optional:
        yield from _match_seq(g, items, k + 1, env, used, claimed)


def _match_repeat(g, r: Repeat, env, used, claimed, iters) -> Iterator[tuple[dict, frozenset, list]]:
    if r.max is None or len(iters) < r.max:
        for e, u in _match_seq(g, r.items, 0, env, used, claimed):
            first = min(u - used)
            # iterations in program order: the same set in another order is the same match
            if iters and first <= iters[-1][0]:
                continue
            local = {n: v for n, v in e.items() if n not in env}
            yield from _match_repeat(g, r, env, u, claimed, iters + [(first, local, e)])
    if len(iters) >= r.min:
        yield env, used, iters


def _resolve(exports, env) -> list[str]:
    out = []
    for x in exports:
        alts = (x,) if isinstance(x, str) else x
        v = next((env[a] for a in alts if env.get(a) is not None), None)
        if v is not None:
            out.append(v)
    return out


def match(p: Pattern, g: Graph, anchor: int, claimed=()) -> Iterator[Match]:
    """Every way `p` matches with its first op at `anchor`, best (greediest) first."""
    for e1, u1 in _match_op(g, p.items[0], {}, frozenset(), claimed, [anchor]):
        for env, used in _match_seq(g, p.items, 1, e1, u1, claimed):
            yield _build(p, g, anchor, env, used)


def _build(p: Pattern, g: Graph, anchor: int, env: dict, used) -> Match:
    captures = {n: v for n, v in env.items() if isinstance(n, str) and n != WILD}
    exports = _resolve(p.exports, env)
    for k, it in enumerate(p.items):
        if not isinstance(it, Repeat):
            continue
        iters = env.get(("#rep", k), [])
        names = sorted({n for _, local, _ in iters for n in local if isinstance(n, str) and n != WILD})
        for n in names:
            captures[n] = [local.get(n) for _, local, _ in iters]
        for _, _, full in iters:
            exports += _resolve(it.exports, full)
    ops = sorted(used)
    produced = {v for i in ops for v in g.ops[i].outputs}
    exports = list(dict.fromkeys(v for v in exports if v in produced))
    inputs = list(dict.fromkeys(v for i in ops for v in g.ops[i].inputs if v not in produced))
    return Match(p.name, anchor, ops, captures, exports, inputs)


# -- legality --


def why_illegal(m: Match, g: Graph, claimed: dict | None = None, check=None) -> str | None:
    """The one legality predicate (see the module docstring); returns the reason, or None if legal.

    `claimed` maps op index -> the op indices of the region that claimed it.
    """
    claimed = claimed or {}
    inside = set(m.ops)
    for i in m.ops:
        if i in claimed:
            return f"op #{i} is already claimed by another region"
    exported = set(m.exports)
    produced = m.produced(g)
    for v in produced:
        if v in exported:
            continue
        if g.program.values[v].kind == "output":
            return f"{v} is a program output but not exported"
        outside = [c for c in g.consumers.get(v, ()) if c not in inside]
        if outside:
            return f"{v} is consumed outside the match (op #{outside[0]}) but not exported"
    last = max(m.ops)
    # outside ops after `last` cannot feed a match op (SSA order), so the walk stays below it
    stack = [c for v in produced for c in g.consumers.get(v, ()) if c not in inside and c < last]
    seen: set[int] = set()
    while stack:
        j = stack.pop()
        if j in seen:
            continue
        unit = claimed.get(j, (j,))
        seen.update(unit)
        for k in unit:
            if k >= last:
                continue
            for v in g.ops[k].outputs:
                for c in g.consumers.get(v, ()):
                    if c in inside:
                        return f"op #{j} outside the match lies on a data path between its ops"
                    if c < last and c not in seen:
                        stack.append(c)
    if check is not None and not check(m, g.program):
        return "the rule's check refused"
    return None

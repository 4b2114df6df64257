"""Program -> list[Region]: non-overlapping, first match in program order wins, every op covered once.

Ops are scanned in program order; at each unclaimed op every rule anchored there is tried in priority
order, and the first match that passes pattern.why_illegal and lowers to a Region wins. Ops no rule
claims become single-op regions (rule None). The list is ordered so that running the regions in list
order respects data flow (a topological order that stays close to program order).
"""

from __future__ import annotations

import heapq
from collections import Counter

from fusion.ir import IRError, Program
from fusion.pattern import Graph, match, why_illegal
from fusion.region import Region, Rule, single_op_region
from fusion.rules import DEFAULT_RULES, rules_by_name

# Bounds the backtracking at one anchor; real programs need one or two tries.
MAX_TRIES_PER_RULE = 256


class PartitionError(IRError):
    """Regions that do not cover the program exactly once, or cannot be ordered."""


def _try_rule(rule: Rule, g: Graph, anchor: int, claimed: dict) -> Region | None:
    for n, m in enumerate(match(rule.pattern, g, anchor, claimed)):
        if n >= MAX_TRIES_PER_RULE:
            return None
        if why_illegal(m, g, claimed, rule.check) is not None:
            continue
        region = rule.lower(m, g.program)
        if region is not None:
            if sorted(region.ops) != m.ops:
                raise PartitionError(f"rule {rule.name}: lowering changed the matched ops")
            return region
    return None


def partition(program: Program, rules=None) -> list[Region]:
    """Regions covering `program`; `rules=[]` gives one region per op (the no-fuse mode).

    `rules` may be Rule objects or rule names (then kept in DEFAULT_RULES priority order).
    """
    if rules is None:
        rules = DEFAULT_RULES
    rules = list(rules)
    if rules and all(isinstance(r, str) for r in rules):
        rules = rules_by_name(rules)
    g = Graph(program)
    claimed: dict[int, tuple[int, ...]] = {}
    regions: list[Region] = []
    for i in range(len(program.ops)):
        if i in claimed:
            continue
        for rule in rules:
            region = _try_rule(rule, g, i, claimed)
            if region is not None:
                unit = tuple(region.ops)
                claimed.update((j, unit) for j in unit)
                regions.append(region)
                break
    # left unclaimed until the end, so a later anchor could still take an earlier op
    regions += [single_op_region(program, i) for i in range(len(program.ops)) if i not in claimed]
    return schedule(program, regions)


def schedule(program: Program, regions: list[Region]) -> list[Region]:
    """Regions in a data-flow order, preferring program order (Kahn's algorithm keyed by first op)."""
    producer: dict[str, int] = {}
    for r, region in enumerate(regions):
        for i in region.ops:
            for v in program.ops[i].outputs:
                producer[v] = r
    deps = [{producer[v] for v in reg.inputs if v in producer} - {r} for r, reg in enumerate(regions)]
    users: list[list[int]] = [[] for _ in regions]
    for r, ds in enumerate(deps):
        for d in ds:
            users[d].append(r)
    waiting = [len(ds) for ds in deps]
    ready = [(min(reg.ops), r) for r, reg in enumerate(regions) if not waiting[r]]
    heapq.heapify(ready)
    order: list[Region] = []
    while ready:
        _, r = heapq.heappop(ready)
        order.append(regions[r])
        for u in users[r]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (min(regions[u].ops), u))
    if len(order) != len(regions):
        stuck = [regions[r].name for r in range(len(regions)) if waiting[r]]
        raise PartitionError(f"regions depend on each other in a cycle: {stuck[:5]}")
    return order


def check_partition(program: Program, regions: list[Region]) -> None:
    """Raise unless every op is covered exactly once and list order respects data flow."""
    seen: dict[int, str] = {}
    for reg in regions:
        for i in reg.ops:
            if i in seen:
                raise PartitionError(f"op #{i} is in {seen[i]} and {reg.name}")
            seen[i] = reg.name
    missing = sorted(set(range(len(program.ops))) - set(seen))
    if missing:
        raise PartitionError(f"ops {missing[:10]} are in no region")
    # state counts as written only by its op (kv_write before attention), not as a step input
    written = {v for o in program.ops for v in o.outputs}
    ready = {v for v in program.values if v not in written}
    for reg in regions:
        # inside a region, ops run in program order
        for i in sorted(reg.ops):
            o = program.ops[i]
            for v in o.inputs:
                if v not in ready:
                    raise PartitionError(
                        f"region {reg.name} (op #{i} {o.kind}) reads {v} before it is written"
                    )
            ready.update(o.outputs)


def summarize(regions: list[Region]) -> dict[str, int]:
    """Region counts by name, in order of first appearance."""
    return dict(Counter(r.name for r in regions))


def format_partition(program: Program, regions: list[Region]) -> str:
    fused = sum(1 for r in regions if r.rule is not None)
    lines = [f"{program.name}: {len(program.ops)} ops -> {len(regions)} regions ({fused} fused)"]
    for name, n in summarize(regions).items():
        lines.append(f"  {n:5d}  {name}")
    lines.append("regions:")
    for k, r in enumerate(regions):
        kinds = " ".join(program.ops[i].kind for i in r.ops)
        lines.append(
            f"  [{k:4d}] {r.name:<32s} ops {r.ops[0]}..{r.ops[-1]} ({kinds}) -> {', '.join(r.outputs)}"
        )
    return "\n".join(lines)

"""Activation memory shared by values whose lifetimes do not overlap (a chunk's or a batched step's
plan: a 512-row chunk of Llama-3.1-8B allocated 5.4 GB of activations, one buffer per op output
over 32 layers, where a few layers' worth are ever live at once).

Planning over the recorded calls (lifetimes, assign_slots: no Vulkan), then place() carves the
slots from the plan's activation arena (executors/plan.py MemoryPlan.place_activations).
Lifetimes count in barrier epochs (the calls between two barriers of barriers_before): a slot
goes to a value only when its last use lies in an earlier epoch than the
value's first, so a barrier already separates the old reads from the new writes and the aliasing
adds none (barriers_before over the slots equals the one over the names; tests hold it to that).
A value read before it is written in the step (carried from the previous step) is live throughout.
"""

from __future__ import annotations

from typing import NamedTuple

from vkdecode.lowering.calls import KernelCall


class Lifetime(NamedTuple):
    first: int  # epoch of its first use
    last: int  # epoch of its last use


def epochs(barriers: list[bool]) -> list[int]:
    """The barrier epoch of each call: how many barriers come before it (one included)."""
    out, e = [], 0
    for b in barriers:
        e += bool(b)
        out.append(e)
    return out


def lifetimes(calls: list[KernelCall], barriers: list[bool], names: set[str]) -> dict[str, Lifetime]:
    """The epochs each of `names` is used in over one step; read before its first write: the
    whole step (it holds the previous step's data)."""
    ep = epochs(barriers)
    end = ep[-1] if ep else 0
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    carried: set[str] = set()
    for i, call in enumerate(calls):
        for j, b in enumerate(call.bindings):
            if b.value not in names:
                continue
            if b.value not in first:
                first[b.value] = ep[i]
                if j not in call.writes:
                    carried.add(b.value)
            last[b.value] = ep[i]
    return {n: Lifetime(0, end) if n in carried else Lifetime(first[n], last[n]) for n in first}


def assign_slots(life: dict[str, Lifetime], nbytes: dict[str, int]) -> tuple[dict[str, int], list[int]]:
    """-> (slot of each value, bytes of each slot). Values by first use, each into the smallest free
    slot that holds it, else the largest free one (grown), else a new slot; a slot is free for a
    value once its last value's last use is in an earlier epoch."""
    slot_of: dict[str, int] = {}
    sizes: list[int] = []
    busy_until: list[int] = []
    for name in sorted(life, key=lambda n: (life[n].first, -nbytes[n], n)):
        lt, need = life[name], nbytes[name]
        free = [s for s in range(len(sizes)) if busy_until[s] < lt.first]
        fits = [s for s in free if sizes[s] >= need]
        if fits:
            s = min(fits, key=lambda s: (sizes[s], s))
        elif free:
            s = max(free, key=lambda s: (sizes[s], -s))
            sizes[s] = need
        else:
            s = len(sizes)
            sizes.append(need)
            busy_until.append(-1)
        slot_of[name] = s
        busy_until[s] = lt.last
    return slot_of, sizes


def slot_key(slot: int) -> str:
    """The name barriers_before sees for every value in a slot."""
    return f"activation-slot:{slot}"


def place(arena, acts: dict[str, int], calls: list[KernelCall], barriers: list[bool]) -> tuple[dict, dict]:
    """-> (a slice of each activation, its slot's name by activation): acts (name -> bytes) placed
    by lifetime in `arena`; one never bound by a call gets its own slice."""
    from vkdecode.vk.memory import Slice

    life = lifetimes(calls, barriers, set(acts))
    slot_of, sizes = assign_slots(life, {n: acts[n] for n in life})
    unused = [n for n in acts if n not in life]
    arena.expect(sum(map(arena.padded, sizes + [acts[n] for n in unused])))
    slots = [arena.alloc(n, slot_key(i)) for i, n in enumerate(sizes)]
    slices = {n: Slice(slots[i].buffer, slots[i].offset, acts[n], n) for n, i in slot_of.items()}
    slices.update({n: arena.alloc(acts[n], n) for n in unused})
    return slices, {n: slot_key(i) for n, i in slot_of.items()}


def activation_memory(plan) -> dict:
    """{"bytes": what a MemoryPlan's activation slices take, "values", "slots" (values where not aliased)}."""
    acts = [v.name for v in plan.program.values.values() if v.kind == "activation"]
    own = {(s.buffer, s.offset): s.size for n in acts if (s := plan.slices.get((n, "data")))}
    return {"bytes": sum(own.values()), "values": len(acts), "slots": len(own)}

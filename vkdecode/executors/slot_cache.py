"""Per-slot prompt caches of a batch (llama.cpp's server slots in spirit): a free slot keeps the
KV rows of the sequence that left it and remembers their tokens, so the next turn of that chat,
joining later, reuses them instead of running its whole prompt again.

executors/batch.py owns the rows and says when they change: remember() when a sequence leaves
(rows 0..len(ids)-1 hold ids), forget() when a slot is taken (its rows are about to be
overwritten). pick() chooses the slot a joining prompt takes: the free slot whose tokens share
the longest prefix with it; with no match (or a tie), the least recently left one, an empty slot
first, so a prompt unrelated to any cache evicts none while an empty slot is free. A match of less
than half a slot's tokens does not count (every chat shares its template's opening tokens; taking
that slot would overwrite more than it saves), though the slot chosen reuses whatever it shares.

The prompt still runs where every joining prompt runs, the decoder's KV cache (its chunk executors
address no slot), and reuses whichever holds more of it: the decoder's cache as it is (KVPrefix:
the last sequence to leave or decode solo there, or the last prompt), or the chosen slot, whose
prefix rows are first copied into the decoder's cache (one small copy). The join then copies the
rows into that slot as always. KVPrefix stays the one cache of the decoder's own path (solo, and
the one-at-a-time generate); a batch consults the slots only for a join given that KVPrefix and
allowed to reuse (cache_prompt). A sequence whose step failed leaves its slot empty.
"""

from __future__ import annotations


def shared_prefix(held: list[int], prompt: list[int]) -> int:
    """Leading prompt tokens whose rows `held` covers; at least one prompt token is left to run
    (the step of the last prompt token gives the first new token), as KVPrefix.reusable."""
    limit = min(len(held), len(prompt) - 1)
    n = 0
    while n < limit and held[n] == prompt[n]:
        n += 1
    return n


class SlotCache:
    def __init__(self, slots: int):
        self.ids: dict[int, list[int]] = {}  # slot -> the tokens its rows 0.. hold (free slots)
        self.left_at = [0] * slots  # slot -> when its last sequence left (0: never): the LRU clock
        self._clock = 0

    def remember(self, slot: int, ids: list[int]) -> None:
        """The sequence in `slot` left: its rows 0..len(ids)-1 hold the K/V of ids."""
        self._clock += 1
        self.left_at[slot] = self._clock
        if ids:
            self.ids[slot] = list(ids)
        else:
            self.ids.pop(slot, None)

    def forget(self, slot: int) -> None:
        """The slot's rows are (about to be) overwritten, or no longer known to hold its ids."""
        self.ids.pop(slot, None)

    def pick(self, free: list[int], prompt: list[int], reuse: bool = True) -> tuple[int, int]:
        """(the slot a joining prompt takes, leading prompt tokens whose rows it holds). reuse off
        (cache_prompt false): no rows are reused, and the slot is chosen as with no match."""

        def shared(s: int) -> int:
            return shared_prefix(self.ids.get(s, []), prompt) if reuse else 0

        def key(s: int):
            n = shared(s)
            n = n if 2 * n >= len(self.ids.get(s, [])) else 0  # a weak match: as none
            return (-n, s in self.ids, self.left_at[s], s)

        slot = min(free, key=key)
        return slot, shared(slot)

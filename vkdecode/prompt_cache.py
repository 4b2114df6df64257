"""Which token ids the executor's KV cache holds, so a prompt that starts with them (the previous
turn of the same chat) runs only its new tokens.

The KV cache lives in device memory between generations; its rows 0..n-1 hold the K/V of the
tokens that went through a step at those positions: the previous prompt, then every generated token
that was fed back. The last generated token of a generation never goes through a step, and steps a
pipelined decode ran past the stop are not counted either, so only rows known to be written are
tracked. Rows past the tracked length may hold anything: attention never reads past the position
of the step, and the next steps overwrite them.
"""

from __future__ import annotations


class KVPrefix:
    def __init__(self):
        self.ids: list[int] = []  # ids[p] is the token whose K/V row p holds
        # False for a model with a recurrent state (Qwen3.5's linear attention): it holds every
        # token that went through a step, pipelined steps past the stop included, and cannot be
        # rewound to a shorter prefix, so nothing is reused (a prompt restarts at position 0)
        self.rewindable = True

    def reusable(self, prompt_ids: list[int]) -> int:
        """Leading prompt tokens whose K/V rows are already there. At least one prompt token is
        always left to run: the step of the last prompt token produces the first new token."""
        if not self.rewindable:
            return 0
        limit = min(len(self.ids), len(prompt_ids) - 1)
        n = 0
        while n < limit and self.ids[n] == prompt_ids[n]:
            n += 1
        return n

    def keep(self, n: int) -> None:
        """Rows n.. are about to be overwritten: forget them."""
        del self.ids[n:]

    def wrote(self, token: int, pos: int) -> None:
        """A step at `pos` fed `token` has completed (its K/V row is written)."""
        if pos != len(self.ids):  # a caller bug: the rows must be written in order
            raise AssertionError(f"KV row {pos} written while {len(self.ids)} rows are tracked")
        self.ids.append(int(token))

    def reset(self, ids: list[int]) -> None:
        """Rows 0..len(ids)-1 hold ids now (copied there from a batch slot)."""
        self.ids = [int(t) for t in ids]

    def clear(self) -> None:
        self.ids.clear()

    def __len__(self) -> int:
        return len(self.ids)

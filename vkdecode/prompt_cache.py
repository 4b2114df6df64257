"""Which token ids the executor's KV cache holds, so a prompt that starts with them (the previous
turn of the same chat) runs only its new tokens.

The KV cache lives in device memory between generations; its rows 0..n-1 hold the K/V of the
tokens that went through a step at those positions: the previous prompt, then every generated token
that was fed back. The last generated token of a generation never goes through a step, and steps a
pipelined decode ran past the stop are not counted either, so only rows known to be written are
tracked. Rows past the tracked length may hold anything: attention never reads past the position
of the step, and the next steps overwrite them.

A model with recurrent states (Qwen3.5's linear attention) reuses a prefix only through a copy of
its states at the end of the last prompt (executors/state_checkpoint.py): the prefix is that
prompt, whole, and keep() sets the live states back to it.
"""

from __future__ import annotations


class KVPrefix:
    def __init__(self):
        self.ids: list[int] = []  # ids[p] is the token whose K/V row p holds
        # False for a model with a recurrent state (Qwen3.5's linear attention): it holds every
        # token that went through a step, pipelined steps past the stop included, and cannot be
        # rewound to a shorter prefix; only the checkpoint's prompt is reused (module doc)
        self.rewindable = True
        self.checkpoint = None  # a StateCheckpoint, for a model that is not rewindable

    def reusable(self, prompt_ids: list[int]) -> int:
        """Leading prompt tokens whose K/V rows are already there. At least one prompt token is
        always left to run: the step of the last prompt token produces the first new token."""
        if not self.rewindable:
            return self._checkpointed(prompt_ids)
        limit = min(len(self.ids), len(prompt_ids) - 1)
        n = 0
        while n < limit and self.ids[n] == prompt_ids[n]:
            n += 1
        return n

    def _checkpointed(self, prompt_ids: list[int]) -> int:
        """The checkpoint's tokens, where the prompt starts with them (and leaves one to run) and
        the KV rows still hold them (a batch's leave or an error may have replaced the rows)."""
        saved = self.checkpoint.ids if self.checkpoint is not None else []
        n = len(saved)
        if 0 < n < len(prompt_ids) and self.ids[:n] == saved and [int(t) for t in prompt_ids[:n]] == saved:
            return n
        return 0

    def keep(self, n: int) -> None:
        """Rows n.. are about to be overwritten: forget them. Not rewindable: n is 0 or the
        checkpoint's length (reusable), and the live recurrent states are set back to it."""
        del self.ids[n:]
        if n and not self.rewindable:
            self.checkpoint.restore()

    def save(self) -> None:
        """The prompt that just ran (self.ids) is the next one's prefix: checkpoint the recurrent
        states (a model without them needs none, its rows are the cache)."""
        if not self.rewindable and self.checkpoint is not None:
            self.checkpoint.save(self.ids)

    def wrote(self, token: int, pos: int) -> None:
        """A step at `pos` fed `token` has completed (its K/V row is written)."""
        if pos != len(self.ids):  # a caller bug: the rows must be written in order
            raise AssertionError(f"KV row {pos} written while {len(self.ids)} rows are tracked")
        self.ids.append(int(token))

    def reset(self, ids: list[int]) -> None:
        """Rows 0..len(ids)-1 hold ids now (copied there from a batch slot)."""
        self.ids = [int(t) for t in ids]

    def clear(self) -> None:
        self.ids.clear()  # the checkpoint no longer matches the rows: _checkpointed refuses it

    def __len__(self) -> int:
        return len(self.ids)

"""A copy of the decode step's recurrent states (Qwen3.5's linear attention) at the end of a prompt:
the prompt cache of a model that has them (prompt_cache.KVPrefix.checkpoint).

Why a copy, not the live state: the live state holds every token that went through a step, the
pipelined steps past a generation's stop included, and a state cannot be rewound to a shorter
prefix. The copy holds exactly the last prompt's tokens. A chat's next turn starts with its
previous prompt, so it restores the copy and runs only what follows (the previous reply and the new
message), as a model with KV caches alone runs the tokens past its cached rows. One copy, the last
prompt's: a second one would double the memory (the Qwen3.5-27B shape's states are ~150 MB) for
chats that interleave, which a batch's slots serve instead.
"""

from __future__ import annotations


class StateCheckpoint:
    """One device copy of an executor's recurrent states: save() copies the live ones in, restore()
    sets them back. ids: the tokens the copy went through (the prompt cache's check; speculative
    decode, which copies before each verify step, leaves them empty)."""

    def __init__(self, executor):
        from fusion.chunk import recurrent_states
        from vkdecode.executors.plan import value_bytes

        self.executor = executor
        values = executor.program.values
        self.names = sorted(recurrent_states(executor.program))
        self.sizes = [value_bytes(values[n]) for n in self.names]
        self.buffer = None  # allocated by the first save: a model never asked to cache pays nothing
        self.ids: list[int] = []  # the tokens the saved states went through
        self.saved = False  # the copy holds states (a restore has something to set back)

    @property
    def bytes(self) -> int:
        return sum(self.sizes)

    def save(self, ids) -> None:
        """Copy the live states, which went through exactly `ids`, into the checkpoint. Where the
        device has no room for the copy, nothing is kept: the next prompts run whole, as without
        the prompt cache, rather than the generation failing after its prompt ran."""
        from vkdecode.errors import DeviceMemoryError

        self.ids, self.saved = [], False  # not valid until the copy has run
        try:
            self.reserve()
        except DeviceMemoryError:
            return
        self._copy(back=False)
        self.ids, self.saved = [int(t) for t in ids], True

    def reserve(self) -> None:
        """Allocate the copy's device memory now (DeviceMemoryError where it does not fit)."""
        if self.buffer is None:
            self.buffer = self.executor.device.buffer(self.bytes, name="recurrent state checkpoint")

    def restore(self) -> None:
        """Set the live states back to the checkpoint's."""
        if not self.saved:
            raise AssertionError("no recurrent state checkpoint to restore")
        self._copy(back=True)

    def _copy(self, back: bool) -> None:
        plan, copies, at = self.executor.plan, [], 0
        for name, size in zip(self.names, self.sizes, strict=True):
            live = plan.slices[(name, "data")]
            if back:
                copies.append((self.buffer, live.buffer, size, at, live.offset))
            else:
                copies.append((live.buffer, self.buffer, size, live.offset, at))
            at += size
        self.executor.device.copy_regions(copies)

    def close(self) -> None:
        if self.buffer is not None:
            self.executor.device.wait_idle()
            self.buffer.close()
            self.buffer = None
        self.ids, self.saved = [], False

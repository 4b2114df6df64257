"""A batch's one sequence on the decoder's own step: while exactly one sequence is live and no
prompt is joining, executors/batch.py (solo=True) decodes it with Decoder.decode, in the decoder's
KV cache: the fused, pipelined step a sequence alone gets from stream_generate. A batched step of
width 1 costs more a token (issue 34: 3.8 vs 1.1 ms on an H200, Qwen3-0.6B F16).

Its KV rows move with it: a sequence that joins an empty batch keeps them in the decoder's cache
(its prompt ran there), they go into its slot when the next prompt begins (to_slot), and a batch
that drains to one copies that one's slot rows back. Both paths draw a sampled token from (seed,
position) and the same logits, so a sequence gives the same tokens either way.

A model with a recurrent state (Qwen3.5's linear attention) decodes here a step at a time: a step
sent ahead, dropped when a prompt begins, would leave the state past the sequence's position, and
to_slot copies the state whole (it has no rows to leave behind).
"""

from __future__ import annotations

from vkdecode.executors.base import keep_recent_stats


class Solo:
    def __init__(self, batch):
        self.batch = batch  # the executors.batch.BatchDecode this is part of
        self.decoder = batch.decoder
        self.slot: int | None = None  # the slot whose sequence decodes here (its rows here)
        self.steps = 0  # tokens decoded solo
        self._decode = None  # Decoder.decode's generator: its steps may be in flight

    def at(self, slot: int) -> None:
        """The decoder's cache holds the rows of the sequence in `slot`: it decodes here now."""
        self.slot = slot
        kv, ids = self.batch.kv, self.batch.rows[slot].ids
        if kv is not None and kv.ids != ids:  # the prompt cache tracks what the cache holds
            kv.reset(ids)

    def step(self, slot: int) -> int:
        """The token after the row's (at its position), from the running decode, started at the
        row when none runs; the caller moves the row's mirror on."""
        row = self.batch.rows[slot]
        if self.slot != slot:  # the batch drained to this sequence
            self.batch._copy_rows(slot, row.pos, back=True)
            self.at(slot)
        try:
            tok = self._next(row)
        except BaseException:  # the decoder's cache may not hold what the rows say: none is kept
            self.stop()
            self.batch.kv = None
            row.kept = False
            raise
        if self.batch.kv is not None:
            self.batch.kv.wrote(row.token, row.pos)  # the step fed row.token has completed
        self.steps += 1
        keep_recent_stats(self.decoder.executor)
        return tok

    def _next(self, row) -> int:
        if self.batch.states:  # no steps ahead (module doc): the decoder's own step, waited for
            self.decoder.executor.set_sampling(row.params)  # a prompt's may be there
            return self.decoder.executor.step(row.token, row.pos)
        for bound in (row.left, None):  # a caller that steps past the row's bound: the rest of ctx
            if self._decode is None:
                self.decoder.executor.set_sampling(row.params)  # a prompt's may be there
                n = bound if bound else self.decoder.ctx - row.pos
                # pipelined, it submits ahead: bounded by the row's last step, none goes to waste
                self._decode = self.decoder.decode(row.token, row.pos, n, list(row.ids))
            try:
                return next(self._decode)
            except StopIteration:
                self._decode = None
            except BaseException:  # the generator has ended (and waited for its steps)
                self._decode = None
                raise
        raise AssertionError(f"no decode step fits at position {row.pos} of {self.decoder.ctx}")

    def to_slot(self) -> None:
        """The solo sequence goes into its slot (a prompt is about to run in the decoder's cache):
        its decode stops and its rows 0..pos-1 are copied there."""
        slot = self.slot
        if slot is None:
            return
        self.stop()
        try:
            self.batch._copy_rows(slot, self.batch.rows[slot].pos)
        except BaseException:  # its rows are still only in the decoder's cache
            self.slot = slot
            raise
        self.batch.written = None

    def leave(self, row, kept: bool) -> None:
        """The solo sequence is done: its decode stops. kept (its rows are known): they go into its
        slot too, whose prompt cache they become (the decoder's cache is the next prompt's)."""
        slot = self.slot
        self.stop()
        if kept:
            self.batch._copy_rows(slot, len(row.ids))

    def stop(self) -> None:
        """Stop the decode (waits for the steps in flight: their tokens are dropped, their KV rows
        past the row's position rewritten later): the sequence is no longer solo."""
        gen, self._decode, self.slot = self._decode, None, None
        if gen is not None:
            gen.close()

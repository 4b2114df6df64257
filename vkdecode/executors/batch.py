"""Batched decode: up to S sequences in one replayed step, at a small fixed set of widths.

Each width B is one executor of fusion/chunk_batch.py's program (B rows, each a sequence of its
own), built and, in replay modes, recorded once like a prompt chunk width; they share the decode
executor's weights, and the widest one's KV slots, batch step buffer and activations. A step runs
at the narrowest width that holds every live sequence; rows past them are padding (STEP_LIVE 0).

KV layout: S fixed slots of ctx rows (fusion/chunk_batch.py says why slots, not pages). A sequence
joins by running its prompt through the decoder's own prompt path (chunks, then the decode step for
the last token: its first new token comes from exactly the kernels it would alone) into the
decoder's KV cache, whose rows are then copied into a free slot (one small recorded copy per join,
none per step). The batch's steps touch neither that cache nor the decoder's step buffer, so the
prompt may run a chunk at a time between them (begin, advance): the live sequences keep stepping.
A sequence that leaves copies its rows back into the decoder's cache, unless a prompt is joining
(whose cache it is then). The prompt cache (prompt_cache.KVPrefix) therefore keeps working: a
prompt that starts with the last sequence (the next turn of its chat) runs only its new tokens.
The slot a sequence leaves keeps its rows too (executors/slot_cache.py says how a joining prompt
picks a slot and which rows it reuses), so interleaved chats each keep their previous turn.

With solo=True, one live sequence with no prompt joining decodes on the decoder's own step in the
decoder's cache (executors/solo.py): it joins without the copy into its slot, its rows go into
the slot when the next prompt begins, and a batch that drains to one copies that one's rows back
(the prompt cache is then that sequence's, as it is anyway once it leaves last).

Recurrent states (Qwen3.5: a copy a slot) move whole with the rows; a step sent ahead may carry one
past its sequence, so no slot's rows are reused or copied back: a prompt joins from position 0, or
from the last prompt's states where it starts with it (KVPrefix.checkpoint, state_checkpoint.py).

Per step the host submits and reads B token ids: 0 descriptor writes and 0 recordings (replay
modes), and no host write while the membership stays the same (the step's advance_rows feeds every
live row its token at its next position); a join or leave rewrites the rows of the next width.
Which width runs n sequences: executors/batch_pick.py."""

from __future__ import annotations

from collections import deque

from vkdecode.errors import ContextError, UsageError
from vkdecode.executors.base import keep_recent_stats
from vkdecode.executors.batch_rows import Joining, Row, stepped

WIDTHS = (1, 2, 4, 8)


def slot_bytes(ex) -> int:
    """Bytes of one slot's KV caches (ctx rows): those of the decode executor `ex`."""
    from vkdecode.executors.plan import value_bytes

    return sum(value_bytes(v) for v in ex.program.values.values() if v.kind == "state")


def _check_fits(ex, slots: int) -> None:
    """Refuse before allocating when the slots' KV caches cannot fit next to what the decoder holds."""
    from vkdecode.errors import DeviceMemoryError
    from vkdecode.vk.memory import format_bytes as fmt

    kv = slot_bytes(ex)
    need, heap = kv * slots + ex.plan.total_bytes, ex.device.info.device_local_bytes
    if heap and need > heap:
        raise DeviceMemoryError(
            f"a batch of {slots} sequences needs {fmt(kv * slots)} of KV cache ({fmt(kv)} a slot at ctx "
            f"{ex.ctx}) beside the model's {fmt(ex.plan.total_bytes)}, but {ex.device.info.name} has "
            f"{fmt(heap)} device-local; use fewer or narrower batch widths or a smaller --ctx"
        )


class BatchDecode:
    def __init__(self, decoder, widths=WIDTHS, solo: bool = False, profile: bool = False, pipelined=False):
        """solo: one live sequence decodes on the decoder's own step (module doc); off, every step is
        a batched one (`vkdecode stats`, bench/batch_decode.py; profile: GPU µs per region).
        pipelined: each step sends the next one ahead (executors/batch_ahead.py)."""
        from fusion.chunk import recurrent_states
        from fusion.chunk_batch import batch_program
        from vkdecode.executors.batch_ahead import Ahead
        from vkdecode.executors.prefill import chunk_executor
        from vkdecode.executors.slot_cache import SlotCache
        from vkdecode.executors.solo import Solo

        ex = decoder.executor
        self.states = recurrent_states(ex.program)  # copied whole, never reused (module doc)
        self.decoder = decoder
        self.widths = tuple(sorted({int(w) for w in widths}))
        if not self.widths or self.widths[0] < 1:
            raise UsageError(f"batch widths must be positive, not {widths!r}")
        self.slots = self.widths[-1]
        self.ctx = ex.ctx
        _check_fits(ex, self.slots)
        self.runners: dict[int, object] = {}
        share = [ex.plan]
        try:
            for w in reversed(self.widths):
                prog = batch_program(ex.program, w, self.slots)
                self.runners[w] = chunk_executor(ex.mode, ex.device, prog, ex.caps, share, profile)
                if len(share) == 1:
                    share = [ex.plan, self.runners[w].plan]
        except BaseException:
            self.close()
            raise
        self.rows: dict[int, Row] = {}  # slot -> its sequence
        self.joining: Joining | None = None  # the prompt on its way into a slot (begin, advance)
        self.kv = None  # the decoder's KVPrefix, when a join was given it
        self.written: tuple | None = None  # (width, slots) the batch step buffer holds
        self.pick: dict[int, int] | None = None  # live sequences -> width (batch_pick.calibrate)
        self.pick_ms: dict[int, float] | None = None  # the step times it chose by
        self.steps: dict[int, int] = dict.fromkeys(self.widths, 0)  # steps run per width
        self.solo = Solo(self) if solo else None
        self.ahead, self.pipelined = Ahead(self), pipelined
        self.cache = SlotCache(self.slots)  # what the free slots' rows hold

    @property
    def free(self) -> list[int]:
        taken = set(self.rows) | ({self.joining.slot} if self.joining is not None else set())
        return [s for s in range(self.slots) if s not in taken]

    def join(
        self, prompt_ids, params, kv=None, should_stop=None, max_steps=None, reuse: bool = True
    ) -> tuple[int, int] | None:
        """Run a prompt and give it a free slot: (slot, its first new token), or None when
        should_stop() turned true during the prompt. kv: the decoder's KVPrefix (reused, kept)."""
        slot = self.begin(prompt_ids, params, kv, max_steps, reuse)
        while True:
            if should_stop is not None and should_stop():
                self.leave(slot)
                return None
            joined = self.advance()
            if joined is not None:
                return joined

    def begin(self, prompt_ids, params, kv=None, max_steps=None, reuse: bool = True) -> int:
        """Start a prompt on its way into a free slot (returned); advance() runs it a piece at a
        time, so steps of the live sequences can run in between. One prompt at a time: it runs in
        the decoder's KV cache (a solo sequence moves into its slot first). kv: the decoder's KVPrefix
        (reused, kept); reuse: a free slot's rows too. max_steps: decode steps it runs at most."""
        from vkdecode.sampling import SamplingParams

        params = params or SamplingParams()
        if self.joining is not None:
            raise UsageError(f"the prompt joining slot {self.joining.slot} has not finished")
        free = self.free
        if not free:
            raise UsageError(f"all {self.slots} batch slots are taken")
        ids = [int(t) for t in prompt_ids]
        vocab = self.decoder.executor.program.meta.get("vocab_size")
        if vocab is not None and any(not 0 <= t < vocab for t in ids):
            raise UsageError(f"a prompt token id is outside the model's vocabulary 0..{vocab - 1}")
        if len(ids) > self.ctx:
            raise ContextError(f"the prompt has {len(ids)} tokens but the context holds {self.ctx}")
        if self.solo is not None:
            self.solo.to_slot()
        self.decoder.clear_stats()  # this prompt's chunks and steps only: a server joins without end
        self.decoder.executor.set_sampling(params)
        # a recurrent state: no slot's rows, only the prompt cache's checkpoint (module doc)
        slot, held = self.cache.pick(free, ids, reuse and kv is not None and not self.states)
        self.cache.forget(slot)  # taken: its rows get overwritten
        start = kv.reusable(ids) if kv is not None and not (self.states and kv.rewindable) else 0
        if kv is not None:
            if held > start:  # the slot holds more of the prompt: its rows go where the pieces run
                kv.keep(0)
                self._copy_rows(slot, held, back=True)
                kv.reset(ids[:held])
                start = held
            kv.keep(start)
            self.kv = kv
        pieces = self.decoder.prompt_pieces(ids[start:], start, kv.wrote if kv is not None else None)
        self.joining = Joining(slot, ids, params, deque(pieces), max_steps, start)
        return slot

    def advance(self, rows: int = 1) -> tuple[int, int] | None:
        """Run the joining prompt's next pieces: one, then more while they fit in `rows` rows of
        work (a chunk counts its width, a decode step 1). Once its last piece ran, it joins:
        (slot, its first new token); else None."""
        j, first, spent = self.joining, -1, 0
        if j is None:
            raise UsageError("no prompt is joining the batch")
        try:
            while j.pieces and (spent == 0 or spent + j.pieces[0].rows <= rows):
                piece = j.pieces.popleft()
                first, spent = piece.run(), spent + piece.rows
            if j.pieces:
                return None
            self.joining = None
            if self.kv is not None and self.kv.ids == j.ids:  # the tracker followed this prompt
                self.kv.save()  # recurrent states: the next prompt's prefix (prompt_cache.py)
            alone = self.solo is not None and not self.rows
            if not alone:  # a solo sequence's rows stay in the decoder's cache
                self._copy_rows(j.slot, len(j.ids))
        except BaseException:  # a failed piece or copy: the slot is free again
            self.joining = None
            raise
        self.rows[j.slot] = Row(first, len(j.ids), j.params, j.ids, j.left)
        self.written = None
        if alone:
            self.solo.at(j.slot)
        return j.slot, first

    def leave(self, slot: int) -> None:
        """The sequence in `slot` is done (finished, or its client gone; a joining prompt stops
        where it is): the slot is free. Its rows go back into the decoder's cache (the prompt
        cache), so its next turn runs only its new tokens, as without a batch; not while a prompt
        is joining: that cache is the prompt's. The slot keeps them too (its prompt cache)."""
        if self.joining is not None and self.joining.slot == slot:
            self.joining = None
        row = self.rows.pop(slot, None)
        if row is None:
            return
        self.written = None
        kept = row.kept and self.kv is not None and not self.states  # rows known to hold row.ids
        solo = self.solo is not None and self.solo.slot == slot  # its rows: the decoder's cache
        if solo:
            self.solo.leave(row, kept)
        self.cache.remember(slot, row.ids if kept else [])
        if kept and self.joining is None and not solo:
            self._copy_rows(slot, len(row.ids), back=True)
            self.kv.reset(row.ids)

    def width(self) -> int:  # the narrowest holding the live sequences, or batch_pick's choice
        return self.pick[len(self.rows)] if self.pick else next(w for w in self.widths if w >= len(self.rows))

    def step(self) -> dict[int, int]:
        """One batched step of every live sequence: slot -> the token it chose. A sequence whose
        next position is past the context must leave first (ContextError otherwise)."""
        live = sorted(self.rows)
        if not live:
            return {}
        full = [s for s in live if self.rows[s].pos >= self.ctx]
        if full:
            raise ContextError(f"slot {full[0]} is at the end of the context ({self.ctx}): it must leave")
        w = self.width()
        ex = self.runners[w]
        try:
            if self.ahead.flight is not None:  # the step sent ahead (batch_ahead.py): its tokens
                out = self.ahead.collect()  # for the rows still as they were when it was sent
                if out:
                    self.send_ahead(live)
                    return out
            if self._solo_next(live):
                return {live[0]: stepped(self.rows[live[0]], self.solo.step(live[0]))}
            if self.written != (w, tuple(live)):
                self.write_rows(ex, w, live)
            ex.step(0, 0)  # the rows are in the batch step buffer: _write_step writes nothing
            toks = ex.plan.read("next_token", "uint32")
        except BaseException:  # the slots may not hold what the rows say: none is copied back or kept
            self.kv = None
            for s in live:
                self.rows[s].kept = False
            raise
        out = {s: stepped(self.rows[s], int(toks[r])) for r, s in enumerate(live)}  # as advance_rows
        self.steps[w] += 1
        self.send_ahead(live)
        keep_recent_stats(ex)
        return out

    def send_ahead(self, live: list[int]) -> None:
        """pipelined: submit the next step of the live rows (sorted slots) now (batch_ahead.py),
        unless it would be solo's or would run past the context."""
        if not self.pipelined or not live or self._solo_next(live):
            return
        w = self.width()
        if self.ahead.usable(self.runners[w]) and all(self.rows[s].pos < self.ctx for s in live):
            if self.written != (w, tuple(live)):
                self.write_rows(self.runners[w], w, live)
            self.ahead.submit(w, live)

    def _solo_next(self, live: list[int]) -> bool:  # the next step is solo's (executors/solo.py)
        return self.solo is not None and len(live) == 1 and self.joining is None

    def write_rows(self, ex, w: int, live: list[int]) -> None:
        from fusion.chunk_batch import BATCH_STEP

        words: list[int] = []
        for r in range(w):
            if r < len(live):
                row = self.rows[live[r]]
                words += [row.token, row.pos, *row.params.step_words(), live[r], 1]
            else:  # padding: the padding slot at positions 0, 1, ...; greedy; never advanced
                words += [0, r - len(live), 0, 0, 0, 0, self.slots, 0]
        s = ex.plan.slices[(BATCH_STEP, "data")]
        s.buffer.write_u32(s.offset // 4, words)
        self.written = (w, tuple(live))

    def _copy_rows(self, slot: int, n: int, back: bool = False) -> None:
        """KV rows 0..n-1 of the decoder's caches into `slot` of the batch caches (back: the other
        way); a recurrent state whole, into or from the slot's copy."""
        from vkdecode.executors.plan import value_bytes

        ex, dst_plan, copies = self.decoder.executor, self.runners[self.slots].plan, []
        for v in (v for v in ex.program.values.values() if v.kind == "state"):
            dec, bat = ex.plan.slices[(v.name, "data")], dst_plan.slices[(v.name, "data")]
            if v.name in self.states:  # a whole state a slot
                size = value_bytes(v)
                at = bat.offset + slot * size
            else:  # n KV rows of ctx a slot
                row = value_bytes(v) // v.shape[0]
                size, at = n * row, bat.offset + slot * self.ctx * row
            if back:
                copies.append((bat.buffer, dec.buffer, size, at, dec.offset))
            else:
                copies.append((dec.buffer, bat.buffer, size, dec.offset, at))
        ex.device.copy_regions(copies)

    def stats(self) -> dict[int, dict]:
        """Per width: steps run, and the host's Vulkan calls per step (mean over its steps)."""
        from vkdecode.stats import host_calls_per_token, mean_counters

        return {
            w: {"steps": self.steps[w], **host_calls_per_token(mean_counters(ex.token_stats))}
            for w, ex in self.runners.items()
        }

    def close(self) -> None:
        if getattr(self, "solo", None) is not None:  # its steps in flight use the decoder: wait
            self.solo.stop()
        if getattr(self, "ahead", None) is not None:
            self.ahead.drop()
        for ex in self.runners.values():
            ex.close()
        self.runners = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

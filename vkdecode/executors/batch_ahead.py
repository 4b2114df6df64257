"""Batched steps one ahead (executors/batch.py): while the host hands out a step's tokens, the GPU
already runs the next one, as pipelined single-sequence decode does (executors/replay.py).

A server's host work per step grows with its sequences (tokens streamed, requests admitted: on the
H200, Llama-3.1-8B Q4_K_M through `vkdecode serve`, 13 ms a 4-row step against 10 ms of GPU work,
43 against 19 at 64 rows; bench/results/nvidia-h200/2026-11-27-serve-narrow). With a step in
flight that work overlaps the GPU's. The next step needs no host write while the membership stays
(advance_rows feeds every live row its token on the GPU), so it is submitted speculatively, right
after a step's tokens are read; advance_rows keeps each row's token by the parity of its position,
so reading step t's tokens after step t + 1 was submitted is safe.

When the membership changes before that step is collected (a sequence joined or left), its
tokens still count for the rows that were in it and still are; a row that left gets nothing (its
K/V row past its tokens is never read; a recurrent state stepped past it is never reused: batch.py),
one that joined steps from the next call on. (Dropping the
whole step instead cost a step per join or leave: on the H200 the 8B served 64 clients at 1,190
tok/s that way against 1,465 without steps ahead.) A step is only sent ahead while every row stays
inside the context and the next step is not solo's. Replay modes only: the unfused executor
re-records every step and keeps the plain synchronous step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fusion.chunk_batch import BATCH_RING
from vkdecode.executors.base import TokenStats, keep_recent_stats
from vkdecode.executors.batch_rows import stepped


@dataclass
class Flight:
    fence: object
    width: int
    rows: list  # (slot, Row object, its position) per batch row, in row order
    pool: object  # the recording's timestamp pool
    host_us: float
    counters: object


class Ahead:
    def __init__(self, batch):
        self.batch = batch  # the executors.batch.BatchDecode this is part of
        self.flight: Flight | None = None
        self.submits = 0  # alternates the runners' two identical recordings
        self.collected = 0  # steps sent ahead whose tokens were used
        self.partial = 0  # of which some rows had joined or left since they were sent
        self.dropped = 0  # steps sent ahead whose results were dropped

    @staticmethod
    def usable(ex) -> bool:
        return len(getattr(ex, "cmds", ())) == 2

    def submit(self, w: int, live: list[int]) -> None:
        """Send the step of width w over the rows `live` (already in the batch step buffer)."""
        b = self.batch
        ex, dev = b.runners[w], b.runners[w].device
        j = self.submits % 2
        before = dev.counters.snapshot()
        t0 = time.perf_counter()
        fence = dev.submit([ex.cmds[j]], wait=False)
        host_us = (time.perf_counter() - t0) * 1e6
        rows = [(s, b.rows[s], b.rows[s].pos) for s in live]
        self.flight = Flight(fence, w, rows, ex.ts_pools[j], host_us, dev.counters.snapshot() - before)
        self.submits += 1

    def collect(self) -> dict[int, int]:
        """Wait for the step in flight: {slot: token} of its rows still as they were when it was
        sent (moved on by the token: batch_rows.stepped), {} if none is. A sequence that left
        since gets nothing, one that joined was not in it; either way the batch step buffer is
        written again before the next step (the GPU moved on rows the host no longer has)."""
        f, self.flight, b = self.flight, None, self.batch
        ex = b.runners[f.width]
        t0 = time.perf_counter()
        ex.device.wait_fence(f.fence)
        ring = ex.plan.read(BATCH_RING, "uint32")
        ns = f.pool.read_ns(0, 2)
        wall_us = f.host_us + (time.perf_counter() - t0) * 1e6
        ex.token_stats.append(TokenStats(f.counters, f.host_us, (ns[1] - ns[0]) / 1e3, wall_us))
        keep_recent_stats(ex)
        out = {}
        for r, (s, row, pos) in enumerate(f.rows):
            if b.rows.get(s) is row and row.pos == pos:
                out[s] = stepped(row, int(ring[(pos % 2) * f.width + r]))
        if len(out) != len(b.rows) or len(out) != len(f.rows):
            b.written = None
            self.partial += 1
        self.collected += 1
        b.steps[f.width] += 1
        return out

    def drop(self) -> None:
        """Wait for the step in flight, if any, and forget it: the batch step buffer must be
        written again (the GPU moved its rows on; the host did not)."""
        if self.flight is not None:
            self.batch.runners[self.flight.width].device.wait_fence(self.flight.fence)
            self.flight = None
            self.dropped += 1
            self.batch.written = None

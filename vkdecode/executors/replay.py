"""Fused replay: regions lowered once, every descriptor set written once, the whole step recorded
once; every token the host writes (token, pos) into the step buffer and submits. Steady state:
0 descriptor writes, 0 allocations, 0 recordings, 1 submit per token.

fuse=False records the unfused kernels once (`replay --no-fuse`): the gain of replay alone."""

from __future__ import annotations

import os
import time
from collections import deque

from vkdecode.executors.base import Executor, TokenStats
from vkdecode.executors.plan import TOKEN_RING
from vkdecode.options import MAX_TOKENS_PER_SUBMIT
from vkdecode.stats import Counters
from vkdecode.vk.descriptors import write_descriptor_set

# steps one submit may carry: two submits in flight must stay within the GPU's token ring
assert MAX_TOKENS_PER_SUBMIT == TOKEN_RING // 2


def fusion_disabled() -> bool:
    return os.environ.get("VKDECODE_NOFUSE", "") not in ("", "0")


class ReplayExecutor(Executor):
    def __init__(
        self,
        device,
        program,
        weights,
        caps=None,
        progress=None,
        fuse: bool = True,
        rules=None,
        profile: bool = False,
        tokens_per_submit: int = 1,
        share=(),
    ):
        if not 1 <= tokens_per_submit <= MAX_TOKENS_PER_SUBMIT:
            raise ValueError(f"tokens_per_submit must be 1..{MAX_TOKENS_PER_SUBMIT}, not {tokens_per_submit}")
        self.tokens_per_submit = tokens_per_submit
        self.fuse = fuse and not fusion_disabled()
        self.rules = rules
        self.mode = "fused" if self.fuse else "replay-nofuse"
        super().__init__(device, program, weights, caps, progress, share)
        try:
            self._record(device, profile)
        except BaseException:
            self.close()
            raise

    def _record(self, device, profile: bool) -> None:
        self.pool = device.descriptor_pool(len(self.items), sum(len(it.ranges) for it in self.items))
        self.sets = []
        for it in self.items:
            dset = self.pool.allocate(it.pipeline)
            write_descriptor_set(device, dset, it.ranges)
            self.sets.append(dset)
        self.profile = profile
        # Two identical recordings, each with its own timestamps: pipelined decode resubmits one
        # while the other runs, and a command buffer may not be pending twice.
        self.ts_pools = [self.timestamps, device.timestamp_pool(2 + len(self.regions))]
        self.cmds = [self._record_steps(device, ts, 1, profile) for ts in self.ts_pools]
        self.cmd = self.cmds[0]
        # tokens_per_submit = K > 1: two more recordings of K steps back to back (each step's last
        # dispatch feeds the next its token and position), for decode() to submit once per K tokens
        k = self.tokens_per_submit
        self.batch_ts = [device.timestamp_pool(2) for _ in range(2)] if k > 1 else []
        self.batch_cmds = [self._record_steps(device, ts, k, False) for ts in self.batch_ts]

    def _record_steps(self, device, ts, steps: int, profile: bool):
        cmd = device.command_buffer()
        cmd.begin(one_time=False)
        self._record_items(cmd, lambda i, it: self.sets[i], profile=profile, ts=ts, steps=steps)
        cmd.end()
        return cmd

    def _partition(self):
        from fusion.partition import partition

        return partition(self.program, [] if not self.fuse else self.rules)

    def _lower(self, region):
        from vkdecode.lowering.regions import region_calls

        return region_calls(self.program, region, self.caps, fuse=self.fuse)

    def _across_regions(self, calls, owners):
        if not self.fuse:
            return calls, owners
        from vkdecode.lowering.attention import absorb_combines
        from vkdecode.lowering.norm_pre import add_norm_pre

        calls, owners = absorb_combines(self.program, calls, owners, self.caps)
        return add_norm_pre(self.program, calls, owners, self.caps)

    def _enqueue(self, token: int, pos: int) -> None:
        self._write_step(token, pos)
        self.device.submit([self.cmd], wait=False)

    def decode(self, token: int, pos: int, max_steps: int):
        """Pipelined decode: the host writes (token, pos) once; every step's last dispatch feeds its
        token to the next step on the GPU, so step t+1 is submitted before token t is read and the
        GPU never waits for the host. Two submits are in flight, each of one step, or of K steps
        with tokens_per_submit = K (the host then reads K tokens per fence; the last n % K go one
        by one). Closing the generator waits for the work still running (its tokens are discarded,
        its KV rows rewritten later) and never submits past the end of the context."""
        n = max(0, min(max_steps, self.ctx - pos))
        k = self.tokens_per_submit
        sizes = [k] * (n // k) + [1] * (n % k)
        dev = self.device
        inflight: deque = deque()
        submitted = [0, 0]  # submits so far of 1-step and of K-step recordings
        self._write_step(token, pos)

        def submit(i: int) -> None:
            size = sizes[i]
            batch = int(size > 1)
            j = submitted[batch] % 2
            cmd, ts = (self.batch_cmds[j], self.batch_ts[j]) if batch else (self.cmds[j], self.ts_pools[j])
            before = dev.counters.snapshot()
            t0 = time.perf_counter()
            fence = dev.submit([cmd], wait=False)
            t1 = time.perf_counter()
            inflight.append((fence, ts, size, (t1 - t0) * 1e6, dev.counters.snapshot() - before))
            submitted[batch] += 1

        try:
            first = 0  # token index of the oldest submit in flight
            nsub = 0
            while nsub < min(2, len(sizes)):
                submit(nsub)
                nsub += 1
            last = time.perf_counter()
            while inflight:
                fence, ts, size, host_us, counters = inflight.popleft()
                dev.wait_fence(fence)
                toks = [self.plan.ring_token(pos + first + i) for i in range(size)]
                ns = ts.read_ns(0, 2)  # read before that recording is resubmitted
                if nsub < len(sizes):
                    submit(nsub)
                    nsub += 1
                now = time.perf_counter()
                gpu_us, wall_us = (ns[1] - ns[0]) / 1e3 / size, (now - last) * 1e6 / size
                # the submit's host work and counters go to its first token
                self.token_stats.append(TokenStats(counters, host_us, gpu_us, wall_us))
                for _ in range(size - 1):
                    self.token_stats.append(TokenStats(Counters(), 0.0, gpu_us, wall_us))
                last = now
                first += size
                yield from toks
        finally:
            for fence, *_ in inflight:
                dev.wait_fence(fence)

    def region_times_us(self) -> list[float]:
        """GPU µs per region of the last step (needs profile=True): timestamp deltas, no barriers."""
        ns = self.timestamps.read_ns()
        t, out = ns[0], []
        for r in range(len(self.regions)):
            out.append((ns[2 + r] - t) / 1e3)
            t = ns[2 + r]
        return out

    def close(self) -> None:
        if getattr(self, "plan", None) is not None:
            super().close()
            for obj in [
                *getattr(self, "cmds", []),
                *getattr(self, "ts_pools", [])[1:],  # absent when
                *getattr(self, "batch_cmds", []),
                *getattr(self, "batch_ts", []),  # __init__
                getattr(self, "pool", None),
            ]:  # failed
                if obj is not None:
                    obj.close()

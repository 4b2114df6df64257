"""Fused replay: regions lowered once, every descriptor set written once, the whole step recorded
once; every token the host writes (token, pos) into the step buffer and submits. Steady state:
0 descriptor writes, 0 allocations, 0 recordings, 1 submit per token.

fuse=False records the unfused kernels once (`replay --no-fuse`): the gain of replay alone."""
from __future__ import annotations

import os
import time
from collections import deque

from vkdecode.executors.base import Executor, TokenStats
from vkdecode.vk.descriptors import write_descriptor_set


def fusion_disabled() -> bool:
    return os.environ.get("VKDECODE_NOFUSE", "") not in ("", "0")


class ReplayExecutor(Executor):
    def __init__(self, device, program, weights, caps=None, progress=None, fuse: bool = True,
                 rules=None, profile: bool = False):
        self.fuse = fuse and not fusion_disabled()
        self.rules = rules
        self.mode = "fused" if self.fuse else "replay-nofuse"
        super().__init__(device, program, weights, caps, progress)
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
        self.cmds = []
        for ts in self.ts_pools:
            cmd = device.command_buffer()
            cmd.begin(one_time=False)
            self._record_items(cmd, lambda i, it: self.sets[i], profile=profile, ts=ts)
            cmd.end()
            self.cmds.append(cmd)
        self.cmd = self.cmds[0]

    def _partition(self):
        from fusion.partition import partition
        return partition(self.program, [] if not self.fuse else self.rules)

    def _lower(self, region):
        from vkdecode.lowering import region_calls
        return region_calls(self.program, region, self.caps, fuse=self.fuse)

    def _across_regions(self, calls, owners):
        if not self.fuse:
            return calls, owners
        from vkdecode.fused_attention import absorb_combines
        return absorb_combines(self.program, calls, owners, self.caps)

    def _enqueue(self, token: int, pos: int) -> None:
        self._write_step(token, pos)
        self.device.submit([self.cmd], wait=False)

    def decode(self, token: int, pos: int, max_steps: int):
        """Pipelined decode: the host writes (token, pos) once; every step's last dispatch feeds its
        token to the next step on the GPU, so step t+1 is submitted before token t is read and the
        GPU never waits for the host. Two steps are in flight; one submit per token. Closing the
        generator waits for the step still running (its token is discarded, its KV row rewritten
        later) and never submits past the end of the context."""
        n = max(0, min(max_steps, self.ctx - pos))
        dev = self.device
        inflight: deque = deque()
        submitted = 0
        self._write_step(token, pos)

        def submit() -> None:
            nonlocal submitted
            before = dev.counters.snapshot()
            t0 = time.perf_counter()
            fence = dev.submit([self.cmds[submitted % 2]], wait=False)
            t1 = time.perf_counter()
            inflight.append((fence, submitted, (t1 - t0) * 1e6, dev.counters.snapshot() - before))
            submitted += 1

        try:
            while submitted < min(2, n):
                submit()
            last = time.perf_counter()
            while inflight:
                fence, k, host_us, counters = inflight.popleft()
                dev.wait_fence(fence)
                tok = self.plan.ring_token(pos + k)
                ns = self.ts_pools[k % 2].read_ns(0, 2)     # read before that buffer is resubmitted
                if submitted < n:
                    submit()
                now = time.perf_counter()
                self.token_stats.append(TokenStats(counters, host_us, (ns[1] - ns[0]) / 1e3,
                                                   (now - last) * 1e6))
                last = now
                yield tok
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
            for obj in [*getattr(self, "cmds", []), *getattr(self, "ts_pools", [])[1:],   # absent when
                        getattr(self, "pool", None)]:                                   # __init__ failed
                if obj is not None:
                    obj.close()

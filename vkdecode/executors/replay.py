"""Fused replay: regions lowered once, every descriptor set written once, the whole step recorded
once; every token the host writes (token, pos) into the step buffer and submits. Steady state:
0 descriptor writes, 0 allocations, 0 recordings, 1 submit per token.

fuse=False records the unfused kernels once (`replay --no-fuse`): the gain of replay alone."""
from __future__ import annotations

import os

from vkdecode.executors.base import Executor
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
        self.pool = device.descriptor_pool(len(self.items), sum(len(it.ranges) for it in self.items))
        self.sets = []
        for it in self.items:
            dset = self.pool.allocate(it.pipeline)
            write_descriptor_set(device, dset, it.ranges)
            self.sets.append(dset)
        self.profile = profile
        self.cmd = device.command_buffer()
        self.cmd.begin(one_time=False)
        self._record_items(self.cmd, lambda i, it: self.sets[i], profile=profile)
        self.cmd.end()

    def _partition(self):
        from fusion.partition import partition
        return partition(self.program, [] if not self.fuse else self.rules)

    def _lower(self, region):
        from vkdecode.lowering import region_calls
        return region_calls(self.program, region, self.caps, fuse=self.fuse)

    def _enqueue(self, token: int, pos: int) -> None:
        self._write_step(token, pos)
        self.device.submit([self.cmd], wait=False)

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
            self.cmd.close()
            self.pool.close()

"""The baseline: one dispatch per op, a descriptor set allocated and written for every dispatch and
the command buffer recorded again every token, as llama.cpp's and MLX's Vulkan paths do."""

from __future__ import annotations

from vkdecode.executors.base import Executor
from vkdecode.vk.descriptors import write_descriptor_set


class UnfusedExecutor(Executor):
    mode = "unfused"

    def __init__(self, device, program, weights, caps=None, progress=None, share=()):
        super().__init__(device, program, weights, caps, progress, share)
        try:
            n_desc = sum(len(it.ranges) for it in self.items)
            self.pool = device.descriptor_pool(len(self.items), n_desc)
            self.cmd = device.command_buffer()
        except BaseException:
            self.close()
            raise

    def _enqueue(self, token: int, pos: int) -> None:
        dev = self.device
        self.pool.reset()

        def fresh_set(i, it):
            dset = self.pool.allocate(it.pipeline)
            write_descriptor_set(dev, dset, it.ranges)
            return dset

        self.cmd.reset()
        self.cmd.begin(one_time=True)
        self._record_items(self.cmd, fresh_set)
        self.cmd.end()
        self._write_step(token, pos)
        dev.submit([self.cmd], wait=False)

    def close(self) -> None:
        if getattr(self, "plan", None) is not None:
            super().close()
            for obj in (getattr(self, "cmd", None), getattr(self, "pool", None)):  # None: __init__ failed
                if obj is not None:
                    obj.close()

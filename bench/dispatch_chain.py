"""The floor of a dispatch chain: N tiny dependent dispatches with each kind of barrier between
them, timed with timestamps. Tells how many µs a fused region saves per dispatch it removes.

    python -m bench.dispatch_chain [-n 500] [--out chain.json]
Writes JSON; never asserts timings."""
from __future__ import annotations

import argparse
import json
import statistics

from vkdecode.vk.descriptors import write_descriptor_set
from vkdecode.vk.device import Device
from vkdecode.vk.ffi import NULL, check, ffi, lib, new, vk

# Barrier kinds between two dispatches: none (no dependency: the overlap limit), exec (execution
# dependency only: not enough for data, tells what the memory part costs), compute (the decode
# step's barrier), full (all stages), buffer (a buffer memory barrier on the written buffer
# instead of a global one), event (set after the dispatch, waited before the next).
KINDS = ("none", "exec", "compute", "buffer", "event", "full")


class _Extra:
    """The barrier kinds CommandBuffer does not offer (bench only)."""

    def __init__(self, dev, buf):
        self.dev = dev
        cs = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        self.cs = cs
        self.bmb = new("VkBufferMemoryBarrier*", {
            "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT, "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT,
            "srcQueueFamilyIndex": 0xFFFFFFFF, "dstQueueFamilyIndex": 0xFFFFFFFF,  # IGNORED
            "buffer": buf.handle, "offset": 0, "size": buf.size})
        self.mb = new("VkMemoryBarrier*", {"srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT,
                                           "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT})
        ev = ffi.new("VkEvent*")
        check("vkCreateEvent", lib.vkCreateEvent(dev.handle, new("VkEventCreateInfo*"), NULL, ev))
        self.event = ev[0]
        self.events = ffi.new("VkEvent[1]", [self.event])

    def record(self, cmd, kind: str) -> None:
        h = cmd.handle
        if kind == "exec":
            lib.vkCmdPipelineBarrier(h, self.cs, self.cs, 0, 0, NULL, 0, NULL, 0, NULL)
        elif kind == "buffer":
            lib.vkCmdPipelineBarrier(h, self.cs, self.cs, 0, 0, NULL, 1, self.bmb, 0, NULL)
        elif kind == "event":
            lib.vkCmdSetEvent(h, self.event, self.cs)
            lib.vkCmdWaitEvents(h, 1, self.events, self.cs, self.cs, 1, self.mb, 0, NULL, 0, NULL)
            lib.vkCmdResetEvent(h, self.event, self.cs)

    def close(self) -> None:
        lib.vkDestroyEvent(self.dev.handle, self.event, NULL)


def chain_us(dev, n: int, barrier: str, reps: int = 7, elems: int = 1024) -> float:
    pipe = dev.pipeline("add", (64, elems), {}, 3)
    bufs = [dev.buffer(elems * 4) for _ in range(3)]
    pool = dev.descriptor_pool(1, 3)
    dset = pool.allocate(pipe)
    write_descriptor_set(dev, dset, [(b, 0, b.size) for b in bufs])
    ts = dev.timestamp_pool(2)
    extra = _Extra(dev, bufs[2])
    cmd = dev.command_buffer()
    cmd.begin(one_time=False)
    ts.reset_cmd(cmd)
    cmd.timestamp(ts, 0)
    for i in range(n):
        if i and barrier == "compute":
            cmd.compute_barrier()
        elif i and barrier == "full":
            cmd.barrier()
        elif i and barrier != "none":
            extra.record(cmd, barrier)
        cmd.bind(pipe, dset)
        cmd.dispatch(elems // 64)
    cmd.timestamp(ts, 1)
    cmd.end()
    times = []
    for _ in range(reps):
        dev.submit([cmd])
        t = ts.read_ns()
        times.append((t[1] - t[0]) / 1e3)
    for o in (cmd, ts, pool, extra, *bufs):
        o.close()
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--out")
    a = ap.parse_args()
    with Device() as dev:
        res = {"device": dev.info.name, "driver": dev.info.driver_version, "dispatches": a.n}
        for elems in (1024, 1 << 18):
            for kind in KINDS:
                us = chain_us(dev, a.n, kind, elems=elems)
                res[f"{kind}-{elems}"] = {"total_us": us, "us_per_dispatch": us / a.n}
                print(f"{dev.info.name}: {a.n} dispatches of {elems // 64} workgroups, barrier {kind:8s}: "
                      f"{us:9.1f} µs = {us / a.n:6.2f} µs each")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

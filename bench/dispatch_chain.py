"""The floor of a dispatch chain: N tiny dependent dispatches with each kind of barrier between
them, timed with timestamps. Tells how many µs a fused region saves per dispatch it removes.

    python -m bench.dispatch_chain [-n 500] [--out chain.json]
Writes JSON; never asserts timings."""

from __future__ import annotations

import argparse
import json
import statistics
import struct

from bench.shaders import path as probe_shader
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
        self.bmb = new(
            "VkBufferMemoryBarrier*",
            {
                "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT,
                "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT,
                "srcQueueFamilyIndex": 0xFFFFFFFF,
                "dstQueueFamilyIndex": 0xFFFFFFFF,  # IGNORED
                "buffer": buf.handle,
                "offset": 0,
                "size": buf.size,
            },
        )
        self.mb = new(
            "VkMemoryBarrier*",
            {"srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT, "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT},
        )
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


def handoff_us(dev, n: int, elems: int, grid_groups: int = 0, reps: int = 7, poll_load: bool = False) -> dict:
    """n links handed over by shader atomics (shaders/chain_link.comp): one dispatch per link with
    no pipeline barrier between them (grid_groups 0), or all links in one dispatch of grid_groups
    resident workgroups with a grid barrier between links. Checks the values the links computed."""
    import numpy as np

    n -= n % 2  # an even chain ends in buffer a
    wg = 64
    groups = elems // wg
    defines = {"GRID": "1"} if grid_groups else {}
    if poll_load:
        defines["POLL_LOAD"] = "1"
    pipe = dev.pipeline(probe_shader("chain_link"), (wg, elems, 1 << 20, n), defines, 3, push_size=8)
    sync = dev.buffer(8, host_visible=True)
    a, b = dev.buffer(elems * 4, host_visible=True), dev.buffer(elems * 4)
    pool = dev.descriptor_pool(1, 3)
    dset = pool.allocate(pipe)
    write_descriptor_set(dev, dset, [(sync, 0, 8), (a, 0, a.size), (b, 0, b.size)])
    ts = dev.timestamp_pool(2)
    cmd = dev.command_buffer()
    cmd.begin(one_time=False)
    ts.reset_cmd(cmd)
    cmd.fill(sync, 0, 8)
    cmd.fill(a, 0, a.size)
    cmd.barrier()
    cmd.timestamp(ts, 0)
    cmd.bind(pipe, dset)
    if grid_groups:
        cmd.push(pipe, struct.pack("<II", 0, groups))
        cmd.dispatch(min(grid_groups, groups))
    else:
        for i in range(n):
            cmd.push(pipe, struct.pack("<II", i, groups))
            cmd.dispatch(groups)
    cmd.timestamp(ts, 1)
    cmd.host_barrier()
    cmd.end()
    times, ok = [], True
    for _ in range(reps):
        dev.submit([cmd])
        t = ts.read_ns()
        times.append((t[1] - t[0]) / 1e3)
        err = int(np.frombuffer(sync.read(8), np.uint32)[1])
        vals = np.frombuffer(a.read(a.size), np.float32)
        ok = ok and err == 0 and bool(np.all(vals == n))
    for o in (cmd, ts, pool, sync, a, b):
        o.close()
    us = statistics.median(times)
    return {"total_us": us, "us_per_dispatch": us / n, "correct": ok}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("--out")
    ap.add_argument(
        "--grid-groups",
        type=int,
        default=132,
        help="resident workgroups of the grid hand-over "
        "(the H100 has 132 SMs); past what the device runs at once it flags a failed wait",
    )
    a = ap.parse_args()
    with Device() as dev:
        res = {"device": dev.info.name, "driver": dev.info.driver_version, "dispatches": a.n}
        for elems in (1024, 1 << 18):
            for kind in KINDS:
                us = chain_us(dev, a.n, kind, elems=elems)
                res[f"{kind}-{elems}"] = {"total_us": us, "us_per_dispatch": us / a.n}
                print(
                    f"{dev.info.name}: {a.n} dispatches of {elems // 64} workgroups, barrier {kind:8s}: "
                    f"{us:9.1f} µs = {us / a.n:6.2f} µs each"
                )
            for name, gg, poll in (
                ("flag", 0, False),
                ("grid", a.grid_groups, False),
                ("grid-poll-load", a.grid_groups, True),
            ):
                r = res[f"{name}-{elems}"] = handoff_us(dev, a.n, elems, gg, poll_load=poll)
                print(
                    f"{dev.info.name}: {a.n} links of {elems // 64} workgroups, hand-over {name:14s}: "
                    f"{r['total_us']:9.1f} µs = {r['us_per_dispatch']:6.2f} µs each, correct {r['correct']}"
                )
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

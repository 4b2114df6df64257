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


def chain_us(dev, n: int, barrier: str, reps: int = 7, elems: int = 1024) -> float:
    pipe = dev.pipeline("add", (64, elems), {}, 3)
    bufs = [dev.buffer(elems * 4) for _ in range(3)]
    pool = dev.descriptor_pool(1, 3)
    dset = pool.allocate(pipe)
    write_descriptor_set(dev, dset, [(b, 0, b.size) for b in bufs])
    ts = dev.timestamp_pool(2)
    cmd = dev.command_buffer()
    cmd.begin(one_time=False)
    ts.reset_cmd(cmd)
    cmd.timestamp(ts, 0)
    for i in range(n):
        if i and barrier == "compute":
            cmd.compute_barrier()
        elif i and barrier == "full":
            cmd.barrier()
        cmd.bind(pipe, dset)
        cmd.dispatch(elems // 64)
    cmd.timestamp(ts, 1)
    cmd.end()
    times = []
    for _ in range(reps):
        dev.submit([cmd])
        t = ts.read_ns()
        times.append((t[1] - t[0]) / 1e3)
    for o in (cmd, ts, pool, *bufs):
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
            for kind in ("none", "compute", "full"):
                us = chain_us(dev, a.n, kind, elems=elems)
                res[f"{kind}-{elems}"] = {"total_us": us, "us_per_dispatch": us / a.n}
                print(f"{dev.info.name}: {a.n} dispatches of {elems // 64} workgroups, barrier {kind:8s}: "
                      f"{us:9.1f} µs = {us / a.n:6.2f} µs each")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

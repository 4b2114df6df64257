"""The persistent region's residency probe on this device: for each grid size, whether a probe run of
the persistent pipeline (shaders/persistent_ffn_qkv.comp mode 1, its grid barriers only) passed,
and how long it took; with --timing-groups, GPU µs of the merged call per phase against the three
dispatches it replaces. Writes JSON; never asserts.

    python -m bench.persistent_probe --shape smollm2-135m --quant q4_1 [--groups 64 128 ...] [--out p.json]
"""
from __future__ import annotations

import argparse
import json
import struct
import time
from dataclasses import replace

from vkdecode import persistent
from vkdecode.executors import make_executor
from vkdecode.kernels import KernelCaps


def _time(dev, entries, reps: int = 200) -> float:
    """GPU µs of one round of entries (pipeline, set, push, groups), a compute barrier before each."""
    ts = dev.timestamp_pool(2)
    cmd = dev.command_buffer()
    try:
        cmd.begin()
        ts.reset_cmd(cmd)
        cmd.timestamp(ts, 0)
        for _ in range(reps):
            for pipe, dset, push, groups in entries:
                cmd.compute_barrier()
                cmd.bind(pipe, dset)
                if push:
                    cmd.push(pipe, push)
                cmd.dispatch(*groups)
        cmd.timestamp(ts, 1)
        cmd.end()
        dev.submit([cmd])
        ns = ts.read_ns(0, 2)
        return (ns[1] - ns[0]) / 1e3 / reps
    finally:
        cmd.close()
        ts.close()


def phase_times(dev, model, caps, grids: list[int]) -> dict:
    """µs per call of the first merged region: its three separate dispatches, then per grid the merged
    call (mode 0), each phase alone (modes 2-4), its grid barriers alone (mode 1 / PROBE_N) and the
    dispatch doing nothing (mode 5)."""
    out = {}
    with make_executor("fused", dev, model.program, model.weights, caps=replace(caps, persistent=0)) as ex:
        calls = [it.call for it in ex.items]
        i = next(i for i in range(len(calls)) if persistent._parse(model.program, calls, i))
        n = 3 if persistent._parse(model.program, calls, i).qkv else 2
        sep = [(it.pipeline, ex.sets[j], it.call.push, it.call.groups) for j, it in enumerate(ex.items[i:i + n], i)]
        out["separate"] = _time(dev, sep)
    for g in grids:
        with make_executor("fused", dev, model.program, model.weights, caps=replace(caps, persistent=g)) as ex:
            j = next((j for j, it in enumerate(ex.items) if it.call.shader == persistent.SHADER), None)
            if j is None:
                out[f"g{g}"] = "probe failed"
                continue
            it = ex.items[j]
            row = {}
            for name, mode in (("all", 0), ("barriers_x8", 1), ("phase1", 2), ("phase2", 3), ("phase3", 4),
                               ("empty", 5)):
                push = struct.pack("<II", mode, persistent.SPIN_RUN)
                row[name] = _time(dev, [(it.pipeline, ex.sets[j], push, (g, 1, 1))])
            out[f"g{g}"] = row
    print(json.dumps(out, indent=1))
    return out


def main(argv=None) -> int:
    from vkdecode.cli_stats import add_model_source_options, bench_model_from_args, open_device
    ap = argparse.ArgumentParser()
    add_model_source_options(ap)
    ap.add_argument("--groups", type=int, nargs="+", default=[2048, *persistent.PROBE_GROUPS, 32, 16, 8, 4])
    ap.add_argument("--timing-groups", type=int, nargs="*", default=[],
                    help="also time the merged call per phase on these grids against its three dispatches")
    ap.add_argument("--wg", type=int, default=0, help="invocations per workgroup (default persistent.WG)")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    model = bench_model_from_args(a, a.ctx or 256, 4)
    persistent.WG = a.wg or persistent.WG
    rows = []
    with open_device(a.device) as dev:
        caps = KernelCaps.from_info(dev.info)
        with make_executor("fused", dev, model.program, model.weights, caps=replace(caps, persistent=0)) as ex:
            calls = [it.call for it in ex.items]
        p = next(q for q in (persistent._parse(model.program, calls, i) for i in range(len(calls))) if q)
        call = persistent.persistent_call(model.program, p, 1, caps, persistent.MODE_PROBE, persistent.SPIN_PROBE)
        for g in a.groups:
            t0 = time.perf_counter()
            ok = persistent.run_probe(dev, call, g)
            rows.append({"groups": g, "passed": ok, "ms": (time.perf_counter() - t0) * 1e3})
            print(f"{g:6d} workgroups: {'passed' if ok else 'FAILED'} in {rows[-1]['ms']:.1f} ms")
        # what the auto choice was when there was one: half the largest grid that passed
        chosen = next((r["groups"] // 2 for r in rows if r["passed"]), 0) if not caps.device_cpu else 0
        print("half the largest grid that passed:", chosen or "none (separate dispatches)")
        out = {"device": dev.info.name, "model": model.describe(), "probes": rows, "chosen": chosen,
               "timing_us": phase_times(dev, model, caps, a.timing_groups) if a.timing_groups else {}}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

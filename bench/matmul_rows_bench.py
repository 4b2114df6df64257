"""Prompt-chunk matmul throughput (GFLOP/s) per chunk width, weight shape and kernel: the tiled
matmul_rows, the narrow one (<= 16 rows), matmul_rows_wide with the automatic tile / split, the tensor-core
matmul_rows_coop where the device has cooperative matrices and, with --sweep / --coop-sweep,
every tile x split. Writes JSON; never asserts timings.

    python -m bench.matmul_rows_bench --preset qwen3 --out $OUT/mm.json
    python -m bench.matmul_rows_bench --preset smollm2 --widths 64 512 --sweep --out $OUT/mm.json
    python -m bench.matmul_rows_bench --preset smollm2 --widths 32 --reps 1 --variants tiled wide   # lavapipe

Each measurement records `reps` times the op's calls (a split-k matmul is two dispatches) with the
executors' barrier after each dispatch, and reads GPU time from timestamps; FLOPs = 2 T out in.
A variant a device cannot run (the narrow kernel beyond 16 rows) is left out.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

import numpy as np

from bench.matvec_bench import random_parts
from fusion.ir import Program
from vkdecode.cli.bench import write_json
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.caps import parse_tuning
from vkdecode.lowering.coop import COOP_TILES
from vkdecode.lowering.matmul_rows import WIDE_TILES
from vkdecode.lowering.ops import op_calls
from vkdecode.vk.pipeline_stats import stats_summary

# (dtype, out, in, what): the matmuls of one layer of a prompt chunk (no lm_head: a prefill chunk
# drops it, fusion/chunk.py)
PRESETS = {
    "smollm2": [
        ("q4_1", 576, 576, "wq/wo"),
        ("q4_1", 192, 576, "wk/wv"),
        ("q4_1", 1536, 576, "gate/up"),
        ("q4_1", 576, 1536, "down"),
    ],
    "qwen3": [
        ("f16", 2048, 1024, "wq"),
        ("f16", 1024, 1024, "wk/wv"),
        ("f16", 1024, 2048, "wo"),
        ("f16", 3072, 1024, "gate/up"),
        ("f16", 1024, 3072, "down"),
    ],
    "qwen3moe": [  # Qwen3-30B-A3B Q4_K_M's attention matmuls (its experts: bench.moe_matmul_bench)
        ("q4_k", 4096, 2048, "wq"),
        ("q4_k", 512, 2048, "wk/wv"),
        ("q4_k", 2048, 4096, "wo"),
    ],
    "llama8b": [  # Llama-3.1-8B Q4_K_M's q4_k matmuls (its down and v are q6_k in some layers)
        ("q4_k", 4096, 4096, "wq"),
        ("q4_k", 1024, 4096, "wk/wv"),
        ("q4_k", 4096, 4096, "wo"),
        ("q4_k", 14336, 4096, "gate/up"),
        ("q4_k", 4096, 14336, "down"),
    ],
}
# how many times each shape runs per layer (q, k, v, o, gate, up, down)
PER_LAYER = {"wq/wo": 2, "wk/wv": 2, "gate/up": 2, "wq": 1, "wo": 1, "down": 1}
VARIANTS = {
    "tiled": {"matmul_narrow": -1, "matmul_wide": -1, "matmul_coop": -1},
    "narrow": {"matmul_narrow": 16, "matmul_wide": -1, "matmul_coop": -1},
    "wide": {"matmul_narrow": -1, "matmul_wide": 1, "matmul_coop": -1},
    "coop": {"matmul_narrow": -1, "matmul_wide": 1, "matmul_coop": 1},
}  # wide where coop cannot


def _program(dtype, out, n_in, rows) -> Program:
    p = Program("bench")
    p.value("w", (out, n_in), dtype, "weight")
    p.value("x", (rows * n_in,), "f32", "state")
    p.value("y", (rows * out,), "f32", "output")
    p.op("matmul", ["w", "x"], ["y"], rows=rows)
    return p


@functools.lru_cache(maxsize=2)
def _weights(dtype: str, out: int, n_in: int) -> dict:
    """Random weight parts of a shape, made once for all its widths and variants."""
    return random_parts(dtype, out, n_in, np.random.default_rng(0))


def measure(dev, dtype, out, n_in, rows, caps: KernelCaps, reps: int, coop_defines: tuple = ()) -> dict:
    """GPU time of one matmul; coop_defines: extra #defines of its tensor-core kernel (probes)."""
    p = _program(dtype, out, n_in, rows)
    arrays = {("w", part): a for part, a in _weights(dtype, out, n_in).items()}
    arrays[("x", "data")] = np.random.default_rng(rows).standard_normal(rows * n_in).astype(np.float32)
    calls = [
        replace(c, defines=tuple(c.defines) + coop_defines) if c.shader == "matmul_rows_coop" else c
        for c in op_calls(p, 0, caps)
    ]
    r = time_calls(dev, p, calls, arrays, reps, read="y")
    r["GFLOPs"] = 2 * rows * out * n_in / (r["us"] * 1e3)
    return r


WARM_SECONDS = 0.5


def time_calls(dev, p: Program, calls, arrays: dict, reps: int, read: str = "") -> dict:
    """GPU time of `reps` runs of calls (a barrier after each dispatch): one buffer per bound value
    and part, filled from arrays[(value, part)] where given (zeros otherwise); with `read`, that
    value's result too (r["out"], f32)."""
    from vkdecode.vk.descriptors import write_descriptor_set

    bufs = {}
    for c in calls:
        for b in c.bindings:
            key = (b.value, b.part)
            if key in bufs:
                continue
            a = arrays.get(key)
            nbytes = (
                a.nbytes
                if a is not None
                else (
                    max(n for c2 in calls for s, n in c2.scratch if s == b.value)
                    if b.value.startswith("scratch:")
                    else p.values[b.value].numel * 4
                )
            )
            bufs[key] = dev.buffer(max(16, nbytes))
            if a is not None:
                bufs[key].write(a)
    pool = dev.descriptor_pool(len(calls), sum(len(c.bindings) for c in calls))
    pipes = []
    for c in calls:
        pipe = dev.pipeline(
            c.shader, spec=c.spec, defines=dict(c.defines), n_bindings=len(c.bindings), push_size=len(c.push)
        )
        d = pool.allocate(pipe)
        write_descriptor_set(
            dev, d, [(bufs[(b.value, b.part)], 0, bufs[(b.value, b.part)].size) for b in c.bindings]
        )
        pipes.append((c, pipe, d))
    stats = [pipe.stats for _, pipe, _ in pipes]  # registers, shared bytes, ... where the driver says
    ts = dev.timestamp_pool(2)
    cmd = dev.command_buffer()
    cmd.begin(one_time=False)
    ts.reset_cmd(cmd)
    for i in range(reps + 1):
        if i == 1:  # the first run warms code and caches; time the rest
            cmd.timestamp(ts, 0)
        for c, pipe, d in pipes:
            cmd.bind(pipe, d)
            if c.push:
                cmd.push(pipe, c.push)
            cmd.dispatch(*c.groups)
            cmd.barrier()
    cmd.timestamp(ts, 1)
    cmd.end()
    # A GPU idles its clock down while the host makes the next case's weights (an H200 went from
    # 1980 to 345-1000 MHz between cases, nvidia-smi's reason "idle"): keep it busy for
    # WARM_SECONDS before timing, or a fast kernel is timed at a slow clock.
    t_end = time.perf_counter() + WARM_SECONDS
    while time.perf_counter() < t_end:
        dev.submit([cmd])
    times = []
    for _ in range(5):
        dev.submit([cmd])
        t0, t1 = ts.read_ns()
        times.append((t1 - t0) / reps)
    out = np.frombuffer(bufs[(read, "data")].read(), np.float32).copy() if read else None
    for o in [cmd, ts, pool] + list(bufs.values()):
        o.close()
    med = float(np.median(times))
    return {
        "out": out,
        "calls": [{"shader": c.shader, "groups": list(c.groups), "defines": dict(c.defines)} for c in calls],
        "us": med / 1e3,
        "us_min": min(times) / 1e3,
        "pipeline_stats": stats,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="all", choices=sorted(PRESETS) + ["all"])
    ap.add_argument("--dtype", default="", help="override the preset's weight dtype (e.g. q4_k, q8_0)")
    ap.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64, 128, 256, 512])
    ap.add_argument(
        "--variants", nargs="+", default=["tiled", "narrow", "wide", "coop"], choices=sorted(VARIANTS)
    )
    ap.add_argument("--sweep", action="store_true", help="also every wide tile x k splits 1, 2, 4")
    ap.add_argument(
        "--coop-sweep", action="store_true", help="also every tensor-core tile x k splits 1, 2, 4"
    )
    ap.add_argument("--groups", type=int, default=0, help="KernelCaps.matmul_groups for the auto wide choice")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--caps", nargs="*", default=[], metavar="KEY=VALUE", help="KernelCaps overrides")
    ap.add_argument("--what", nargs="*", default=[], help="only these shapes of the preset (e.g. gate/up)")
    ap.add_argument(
        "--coop-defines",
        nargs="*",
        default=[],
        metavar="A,B=1",
        help="probes: the coop variant again with these #defines added to its kernel, one variant each",
    )
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.vk import Device

    dev = Device()
    base = KernelCaps.from_info(dev.info, matmul_groups=a.groups, **parse_tuning(a.caps))
    res = {"device": dev.info.name, "date": time.strftime("%Y-%m-%d"), "caps": base.__dict__, "rows": []}
    tunings = [(v, VARIANTS[v]) for v in a.variants]
    if a.sweep:
        tunings += [
            (f"wide-{tm}x{tn}-s{s}", dict(VARIANTS["wide"], matmul_tile=f"{tm}x{tn}", matmul_splitk=s))
            for tm, tn in WIDE_TILES
            for s in (1, 2, 4)
        ]
    if a.coop_sweep and base.coop_matrix:
        tunings += [
            (
                f"coop-{':'.join('x'.join(map(str, t[i : i + 2])) for i in (0, 2))}-s{s}",
                dict(VARIANTS["coop"], coop_tile=f"{t[0]}x{t[1]}:{t[2]}x{t[3]}", matmul_splitk=s),
            )
            for t in COOP_TILES
            for s in (1, 2, 4)
        ]
    probes = {
        f"coop+{d}": tuple(tuple((kv + "=1").split("=")[:2]) for kv in d.split(",")) for d in a.coop_defines
    }
    tunings += [(name, VARIANTS["coop"]) for name in probes]
    sums: dict[tuple[str, str, int], float] = {}
    shapes = [(m,) + s for m in (sorted(PRESETS) if a.preset == "all" else [a.preset]) for s in PRESETS[m]]
    shapes = [s for s in shapes if not a.what or s[-1] in a.what]
    for model, dtype, out, n_in, what in shapes:
        dtype = a.dtype or dtype
        for rows in a.widths:
            first = None  # the first variant's result: every other one is compared with it
            for name, t in tunings:
                if (name == "narrow" and rows > 16) or (name.startswith("coop") and not base.coop_matrix):
                    continue
                try:
                    r = measure(dev, dtype, out, n_in, rows, replace(base, **t), a.reps, probes.get(name, ()))
                except ValueError as e:  # a tile this device's shared memory does not hold
                    print(f"{name}: {e}", file=sys.stderr)
                    continue
                y = r.pop("out")
                first = y if first is None else first
                r["out_absmax"] = float(np.abs(y).max())  # an all-zero result would compare equal
                r["err_vs_first"] = float(np.abs(y - first).max() / max(1e-30, float(np.abs(first).max())))
                r.update(model=model, variant=name, dtype=dtype, out=out, n_in=n_in, what=what, rows=rows)
                res["rows"].append(r)
                key = (model, name, rows)
                sums[key] = sums.get(key, 0.0) + PER_LAYER.get(what, 1) * r["us"]
                print(
                    f"{dtype:5s} {out:5d}x{n_in:<5d} {what:8s} T {rows:4d} {name:16s} {r['us']:9.1f} us "
                    f"{r['GFLOPs']:8.0f} GFLOP/s  {[c['groups'] for c in r['calls']]} "
                    f"{[stats_summary(st) for st in r['pipeline_stats']]} "
                    f"err {r['err_vs_first']:.1e}",
                    flush=True,
                )
    # per layer of the preset's model (q, k, v, o, gate, up, down), summed per variant and width
    res["layer_us"] = [
        {"model": m, "variant": v, "rows": n, "us": us} for (m, v, n), us in sorted(sums.items())
    ]
    for row in res["layer_us"]:
        print(
            f"layer of {row['model']:8s} {row['variant']:16s} T {row['rows']:4d} {row['us']:9.1f} us",
            flush=True,
        )
    # the fastest variant per shape and width (what KernelCaps' automatic choice should pick)
    best: dict[tuple, dict] = {}
    for r in res["rows"]:
        key = (r["model"], r["what"], r["dtype"], r["rows"])
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    res["best"] = [
        {
            "model": m,
            "what": w,
            "dtype": d,
            "rows": n,
            "variant": r["variant"],
            "us": r["us"],
            "GFLOPs": r["GFLOPs"],
        }
        for (m, w, d, n), r in sorted(best.items())
    ]
    for b in res["best"]:
        print(
            f"best: {b['model']:8s} {b['what']:8s} T {b['rows']:4d} {b['variant']:16s} {b['GFLOPs']:8.0f} GFLOP/s",
            flush=True,
        )
    return finish(dev, res, a.out)


def finish(dev, res: dict, out: str) -> int:
    """A kernel bench's end: validation checked, the device closed, the JSON written (out given)."""
    dev.check_validation()
    dev.close()
    if out:
        write_json(res, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

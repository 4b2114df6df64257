"""The floor of a dispatch that streams N weight bytes: a kernel that only loads and folds them
(shaders/stream_read.comp), chained with the decode step's barrier, against the matvec kernels of
the same bytes in the same process. It tells how much of a matvec dispatch's time beyond the copy
rate is the dispatch itself (ramp, tail, barrier) and how much is the kernel.

    python -m bench.stream_floor [--out floor.json]
Writes JSON; never asserts timings."""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.matvec_bench import COPY_SET_BYTES, Case, chain_times, measure
from bench.shaders import path as probe_shader
from vkdecode.cli.bench import write_json
from vkdecode.lowering.calls import KernelCaps


def _q4k(rows: int, cols: int) -> int:
    return rows * cols * 144 // 256  # bytes: 144 a 256-weight superblock


def _q6k(rows: int, cols: int) -> int:
    return rows * cols * 210 // 256


def _f16(rows: int, cols: int) -> int:
    return rows * cols * 2


def _q41(rows: int, cols: int) -> int:
    return rows * cols * 20 // 32  # bytes: 20 a 32-weight block


# (what, bytes): Llama-3.1-8B Q4_K_M's matvecs, and the matvec shapes that read them
SIZES = [
    ("o 4096x4096 q4_k", _q4k(4096, 4096)),
    ("gate 14336x4096 q4_k", _q4k(14336, 4096)),
    ("down 4096x14336 q6_k", _q6k(4096, 14336)),
    ("gate+up 2x14336x4096 q4_k", _q4k(2 * 14336, 4096)),
]
MATVECS = [("q4_k", 4096, 4096), ("q4_k", 14336, 4096), ("q6_k", 4096, 14336), ("q4_k", 4096, 14336)]
# (label, workgroup size, loads in flight per invocation, groups: 0 = one pass over the bytes)
GRIDS = [
    ("pass 256x1", 256, 1, 0),
    ("pass 256x4", 256, 4, 0),
    ("pass 64x2", 64, 2, 0),
    ("pass 128x8", 128, 8, 0),
    ("stride 264x256x4", 256, 4, 264),
    ("stride 528x256x4", 256, 4, 528),
    ("stride 1056x256x2", 256, 2, 1056),
    ("stride 2112x128x4", 128, 4, 2112),
]


WARM_S = 0.3  # submit this long before timing: at 200 short dispatches a submit, an idle H100's clocks
# (360 MHz) had not come up after measure()'s two discarded runs (2-4x slower figures)
# One layer's matvec reads in step order (q/k/v, o, gate+up, down) per shape: the 8B's K-quants, and
# the small shapes whose dispatches are mostly boundary (what a merged layer could save there)
LAYERS = {
    "llama3.1-8b-q4_k_m": [
        ("qkv", _q4k(4096 + 1024, 4096) + _q6k(1024, 4096)),
        ("o", _q4k(4096, 4096)),
        ("gate+up", _q4k(2 * 14336, 4096)),
        ("down q6_k", _q6k(4096, 14336)),
    ],
    "qwen3-0.6b-f16": [
        ("qkv", _f16(2048 + 2 * 1024, 1024)),
        ("o", _f16(1024, 2048)),
        ("gate+up", _f16(2 * 3072, 1024)),
        ("down", _f16(1024, 3072)),
    ],
    "llama3.2-1b-f16": [
        ("qkv", _f16(2048 + 2 * 512, 2048)),
        ("o", _f16(2048, 2048)),
        ("gate+up", _f16(2 * 8192, 2048)),
        ("down", _f16(2048, 8192)),
    ],
    "smollm2-135m-q4_1": [
        ("qkv", _q41(576 + 2 * 192, 576)),
        ("o", _q41(576, 576)),
        ("gate+up", _q41(2 * 1536, 576)),
        ("down", _q41(576, 1536)),
    ],
}
MAX_PER = 24  # loads in flight per invocation in one pass of a merged phase (registers: 4 each)
PHASE_GRIDS = (132, 264, 528)
# merged-phase variants: stream_phases.comp's PRE (0 loads after the barrier, 1 before it, 2 between
# the halves of a split barrier, 3 the same with an acquiring workgroup barrier); "strided" takes
# `per` loads a pass, the others one pass per phase
PHASE_VARIANTS = {"strided": 0, "1pass": 0, "preload": 1, "split": 2, "split acq": 3}
SPIN = 1 << 22  # polls before a grid barrier's wait gives up and sets the error word


def _chain_us(dev, reps: int, copies: int, barrier: str, record) -> float:
    """median GPU µs of record(cmd, copy) and the barrier, after WARM_S of untimed submits"""
    return float(np.median(chain_times(dev, reps, copies, barrier, record, warm_s=WARM_S, discard=0))) / 1e3


def _sources(dev, sizes: list[int]) -> list[list]:
    """copies of one random buffer per size (16-byte words), enough copies that a round exceeds L2"""
    copies = max(2, min(64, COPY_SET_BYTES // sum(sizes)))
    rng = np.random.default_rng(0)
    out = []
    for _ in range(copies):
        bufs = []
        for n in sizes:
            b = dev.buffer(n - n % 16)
            b.write(rng.integers(0, 2**32, (n - n % 16) // 4, dtype=np.uint32))
            bufs.append(b)
        out.append(bufs)
    return out


def _read_sets(dev, pool, pipes, srcs, dst) -> list[list]:
    """per copy, one stream_read descriptor set per source"""
    from vkdecode.vk.descriptors import write_descriptor_set

    out = []
    for bufs in srcs:
        row = []
        for pipe, b in zip(pipes, bufs):
            d = pool.allocate(pipe)
            write_descriptor_set(dev, d, [(b, 0, b.size), (dst, 0, dst.size)])
            row.append(d)
        out.append(row)
    return out


def stream_rows(dev, nbytes: int, grids, reps: int, barriers) -> list[dict]:
    """Per barrier kind and grid (label, workgroup size, loads per invocation, groups: 0 = one pass),
    GPU µs of one stream_read dispatch of nbytes, all over one set of source copies."""
    srcs = _sources(dev, [nbytes])
    words = (nbytes - nbytes % 16) // 16
    dst = dev.buffer(1 << 20)
    pool = dev.descriptor_pool(len(srcs) * len(grids), 2 * len(srcs) * len(grids))
    pipes = {
        label: dev.pipeline(probe_shader("stream_read"), (wg, words, per), None, 2)
        for label, wg, per, _ in grids
    }
    sets = {label: _read_sets(dev, pool, [pipe], srcs, dst) for label, pipe in pipes.items()}
    rows = []
    for barrier in barriers:
        for label, wg, per, groups in grids:
            n_groups = groups or -(-words // (wg * per))

            def record(cmd, c, _bar, pipe=pipes[label], s=sets[label], n_groups=n_groups):
                cmd.bind(pipe, s[c][0])
                cmd.dispatch(n_groups)

            us = _chain_us(dev, reps, len(srcs), barrier, record)
            rows.append(
                {
                    "bytes": nbytes,
                    "grid": label,
                    "barrier": barrier,
                    "us": us,
                    "GBps": nbytes / us / 1e3,
                    "groups": n_groups,
                    "copies": len(srcs),
                }
            )
    for o in [pool, dst] + [b for bufs in srcs for b in bufs]:
        o.close()
    return rows


def _single_pass(words: int, threads: int) -> int:
    """loads per invocation for one pass over `words` with `threads` invocations (capped)"""
    return max(1, min(MAX_PER, -(-words // threads)))


def phases_us(
    dev, sizes: list[int], reps: int, grids=PHASE_GRIDS, wg: int = 256, per: int = 4, barrier: str = "compute"
) -> dict:
    """GPU µs per layer: the reads as stream_read dispatches with `barrier` between them ("compute":
    the decode step's; "full" all stages and accesses, which this probe used before 2026-11-26),
    against one stream_phases dispatch (grid barriers between the phases) per grid in `grids`: with
    `per` loads per invocation per pass and the loads after each barrier, and with one pass per
    phase ("1pass") and its loads issued before the barrier ("preload")."""
    import struct

    from vkdecode.vk.descriptors import write_descriptor_set

    srcs = _sources(dev, sizes)
    words = [(n - n % 16) // 16 for n in sizes]
    dst, sync, hand = dev.buffer(1 << 20), dev.buffer(64), dev.buffer(8 << 18)
    err = dev.buffer(64, readback=True)
    sync.write(np.zeros(16, np.uint32))
    err.write(np.zeros(16, np.uint32))
    reads = [dev.pipeline(probe_shader("stream_read"), (wg, w, per), None, 2) for w in words]
    variants = [(g, name) for g in grids for name in PHASE_VARIANTS]
    pool = dev.descriptor_pool(len(srcs) * (4 + len(variants)), len(srcs) * (8 + 8 * len(variants)))
    read_sets = _read_sets(dev, pool, reads, srcs, dst)

    def chain(cmd, c, bar):
        for i, (pipe, d, w) in enumerate(zip(reads, read_sets[c], words)):
            if i:
                bar()
            cmd.bind(pipe, d)
            cmd.dispatch(-(-w // (wg * per)))

    res = {"barrier": barrier, "chain": _chain_us(dev, reps, len(srcs), barrier, chain)}
    for g, name in variants:
        pers = [per] * 4 if name == "strided" else [_single_pass(w, g * wg) for w in words]
        pipe = dev.pipeline(
            probe_shader("stream_phases"), (wg, *words, *pers, PHASE_VARIANTS[name]), None, 8, 4
        )
        sets = []
        for bufs in srcs:
            d = pool.allocate(pipe)
            write_descriptor_set(
                dev,
                d,
                [(b, 0, b.size) for b in bufs]
                + [(sync, 0, sync.size), (err, 0, err.size), (dst, 0, dst.size), (hand, 0, hand.size)],
            )
            sets.append(d)

        def merged(cmd, c, _bar, pipe=pipe, sets=sets, g=g):
            cmd.bind(pipe, sets[c])
            cmd.push(pipe, struct.pack("<I", SPIN))
            cmd.dispatch(g)

        key = f"merged {g}x{wg}" + ("" if name == "strided" else " " + name)
        res[key] = _chain_us(dev, reps, len(srcs), barrier, merged)
        res[key + " per"] = pers
        res[key + " error"] = int(err.read_array(np.uint32, 1)[0])
    for o in [pool, dst, sync, err, hand] + [b for bufs in srcs for b in bufs]:
        o.close()
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--barrier", nargs="+", default=["full", "none"], help="barrier kinds of the plain reads")
    ap.add_argument(
        "--phase-barrier",
        default="compute",
        choices=["compute", "full"],
        help="--phases: the barrier between dispatches (compute: the decode step's)",
    )
    ap.add_argument("--small", action="store_true", help="a tiny run for lavapipe (tests, CI)")
    ap.add_argument(
        "--phases",
        action="store_true",
        help="only the merged-phases probe: one layer's reads, 4 dispatches vs one with grid barriers",
    )
    ap.add_argument(
        "--layer",
        nargs="+",
        default=["llama3.1-8b-q4_k_m"],
        choices=sorted(LAYERS),
        help="the shapes whose layer reads --phases merges",
    )
    ap.add_argument("--grids", type=int, nargs="+", default=list(PHASE_GRIDS), help="merged grids (--phases)")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.vk import Device

    dev = Device()
    caps = KernelCaps.from_info(dev.info)
    sizes, grids, mvs = SIZES, GRIDS, MATVECS
    if a.small:
        sizes, grids, mvs = [("tiny", 1 << 16)], GRIDS[:2], [("q4_k", 256, 256)]
    res = {
        "device": dev.info.name,
        "driver": dev.info.driver_version,
        "date": time.strftime("%Y-%m-%d"),
        "reps": a.reps,
        "stream": [],
        "matvec": [],
    }
    if a.phases:
        grids = (1,) if a.small else tuple(a.grids)  # one workgroup: resident anywhere, lavapipe too
        res["phases"] = {}
        for shape in a.layer:
            layer = [(w, 1 << 16) for w, _ in LAYERS[shape]] if a.small else LAYERS[shape]
            res["phases"][shape] = {
                "layer": layer,
                **phases_us(dev, [n for _, n in layer], a.reps, grids, barrier=a.phase_barrier),
            }
            print(shape, res["phases"][shape], flush=True)
        sizes, mvs = [], []
    for what, nbytes in sizes:
        for r in stream_rows(dev, nbytes, grids, a.reps, a.barrier):
            res["stream"].append({"what": what, **r})
            print(
                f"{what:28s} {r['barrier']:5s} {r['grid']:20s} {r['us']:8.2f} µs {r['GBps']:7.0f} GB/s",
                flush=True,
            )
    for dtype, out, n_in in mvs:
        case = Case(dev, dtype, out, n_in)
        for barrier in a.barrier:
            r = measure(case, caps, reps=a.reps, barrier=barrier, warm_s=WARM_S)
            r.pop("pipeline_stats", None)
            res["matvec"].append(r)
            print(
                f"matvec {dtype} {out}x{n_in} {barrier:5s} {r['us']:8.2f} µs {r['GBps']:7.0f} GB/s",
                flush=True,
            )
        case.close()
    if a.out:
        write_json(res, a.out)
    dev.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

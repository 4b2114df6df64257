"""Matvec kernel bandwidth per weight dtype, shape and workgroup shape, against a Vulkan buffer copy.

    python -m bench.matvec_bench [--preset smollm2|qwen3|all] [--sweep] [--out results.json]

VKDECODE_PIPELINE_STATS=1 also records the driver's statistics of each kernel (registers per
invocation, instruction counts) where it offers VK_KHR_pipeline_executable_properties (NVIDIA does).

Each measurement records `reps` dispatches of one matmul with a barrier between them (as in the
decode chain), rotating over enough distinct weight copies that the set exceeds the GPU's L2,
and reads GPU time from timestamps. Weights are random words (timing does not depend on values).
Writes JSON; never asserts timings.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

import numpy as np

from fusion.ir import Program
from vkdecode.cli.bench import write_json
from vkdecode.lowering.calls import KernelCaps, weight_parts
from vkdecode.lowering.ops import op_calls
from vkdecode.vk.pipeline_stats import local_memory_bytes

# (dtype, out, in, what)
PRESETS = {
    "smollm2": [
        ("q4_1", 576, 576, "wq/wo"),
        ("q4_1", 192, 576, "wk/wv"),
        ("q4_1", 1536, 576, "gate/up"),
        ("q4_1", 576, 1536, "down"),
        ("q8_0", 49152, 576, "lm_head"),
    ],
    "llama1b": [
        ("f16", 2048, 2048, "wq/wo"),
        ("f16", 512, 2048, "wk/wv"),
        ("f16", 8192, 2048, "gate/up"),
        ("f16", 2048, 8192, "down"),
    ],
    "qwen3": [
        (dt, o, i, w)
        for dt in ("f16", "q8_0")
        for o, i, w in [
            (2048, 1024, "wq"),
            (1024, 1024, "wk/wv"),
            (1024, 2048, "wo"),
            (3072, 1024, "gate/up"),
            (1024, 3072, "down"),
            (151936, 1024, "lm_head"),
        ]
    ],
}
PRESETS["all"] = PRESETS["smollm2"] + PRESETS["qwen3"]
# Llama-3.1-8B's matrices in llama.cpp's Q4_K_M mix (q6_k for attn_v, half the ffn_down and the
# head), with f16 for the rate of the unquantised kernel on the same shapes
PRESETS["llama8b"] = [
    ("q4_k", 4096, 4096, "wq/wo"),
    ("q4_k", 1024, 4096, "wk"),
    ("q6_k", 1024, 4096, "wv"),
    ("q4_k", 14336, 4096, "gate/up"),
    ("q4_k", 4096, 14336, "down"),
    ("q6_k", 4096, 14336, "down"),
    ("q6_k", 128256, 4096, "lm_head"),
    ("f16", 14336, 4096, "gate/up"),
    ("q4_1", 14336, 4096, "gate/up"),
]
# bytes/s per weight dtype on one shape (Qwen3-0.6B's gate/up and down): the K-quants' matvec should
# read its bytes at no worse a rate than q4_1's (issue 13)
PRESETS["dtypes"] = [
    (dt, o, i, w)
    for o, i, w in [(3072, 1024, "gate/up"), (1024, 3072, "down")]
    for dt in ("q4_1", "q4_k", "q5_k", "q6_k", "q8_0", "q5_0", "q3_k", "q2_k", "iq4_nl", "f16")
]
COPY_SET_BYTES = 256 << 20  # > the H100's 50 MB L2


def random_parts(dtype: str, out: int, n_in: int, rng) -> dict[str, np.ndarray]:
    if dtype == "f32":
        return {"data": rng.standard_normal((out, n_in), dtype=np.float32)}
    if dtype == "f16":
        return {"data": rng.standard_normal((out, n_in)).astype(np.float16).view(np.uint32)}
    from vkdecode.benchmark.shapes import random_weight

    return random_weight(dtype, (out, n_in), rng).parts  # valid blocks, every quant dtype


def _program(dtype, out, n_in, xrows: int = 1) -> Program:
    """One matmul; xrows > 1: a batched decode step's (rows=xrows, batch: MV_XROWS)."""
    p = Program("bench")
    p.value("w", (out, n_in), dtype, "weight")
    p.value("x", (xrows * n_in,), "f32", "state")
    p.value("y", (xrows * out,), "f32", "output")
    p.op("matmul", ["w", "x"], ["y"], **({"rows": xrows, "batch": True} if xrows > 1 else {}))
    return p


class Case:
    """Weight copies (enough to exceed L2), x and y of one shape, reused across workgroup shapes."""

    def __init__(self, dev, dtype: str, out: int, n_in: int, copies: int = 0, xrows: int = 1):
        rng = np.random.default_rng(0)
        parts = random_parts(dtype, out, n_in, rng)
        self.dev, self.dtype, self.out, self.n_in, self.xrows = dev, dtype, out, n_in, xrows
        self.wbytes = sum(a.nbytes for a in parts.values())
        self.copies = copies or max(1, min(64, COPY_SET_BYTES // self.wbytes))
        self.bufs = []
        for _ in range(self.copies):
            self.bufs.append({k: dev.buffer(a.nbytes) for k, a in parts.items()})
            for k, a in parts.items():
                self.bufs[-1][k].write(a)
        self.parts, self.x_host = parts, rng.standard_normal(xrows * n_in).astype(np.float32)
        self.x = dev.buffer(xrows * n_in * 4)
        self.x.write(self.x_host)
        self.y = dev.buffer(xrows * out * 4)

    def close(self) -> None:
        for o in [self.x, self.y] + [b for c in self.bufs for b in c.values()]:
            o.close()


def _barrier_fn(cmd, mode: str):
    """full: the executors' CommandBuffer.barrier(); compute: shader write -> shader read/write only."""
    if mode == "full":
        return cmd.barrier
    if mode == "none":
        return lambda: None
    from vkdecode.vk.ffi import NULL, lib, new, vk

    stage = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
    mb = new(
        "VkMemoryBarrier*",
        {
            "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT,
        },
    )
    cmd._bench_mb = mb  # keep the struct alive while recording
    return lambda: lib.vkCmdPipelineBarrier(cmd.handle, stage, stage, 0, 1, mb, 0, NULL, 0, NULL)


def chain_times(
    dev, reps: int, copies: int, barrier: str, record, warm_s: float = 0.0, discard: int = 2, runs: int = 5
) -> list[float]:
    """ns per rep of `runs` submits of one command buffer holding reps + 1 times record(cmd, copy
    index, barrier function for barriers inside a rep) then the barrier; the first rep is untimed (it
    warms code and x). Before them, warm_s seconds of submits and `discard` more: the first runs
    bring the clocks up after host-side setup."""
    ts = dev.timestamp_pool(2)
    cmd = dev.command_buffer()
    cmd.begin(one_time=False)
    bar = _barrier_fn(cmd, barrier)
    ts.reset_cmd(cmd)
    for i in range(reps + 1):
        if i == 1:
            cmd.timestamp(ts, 0)
        record(cmd, i % copies, bar)
        bar()
    cmd.timestamp(ts, 1)
    cmd.end()
    try:
        t_end = time.perf_counter() + warm_s
        while time.perf_counter() < t_end:
            dev.submit([cmd])
        times = []
        for k in range(discard + runs):
            dev.submit([cmd])
            t0, t1 = ts.read_ns()
            if k >= discard:
                times.append((t1 - t0) / reps)
        return times
    finally:
        cmd.close()
        ts.close()


def measure(
    case: Case,
    caps: KernelCaps,
    reps: int = 200,
    barrier: str = "full",
    defines: dict | None = None,
    warm_s: float = 0.0,
) -> dict:
    """GPU µs of one matmul dispatch of the case's shape; the case's y holds the last result. warm_s:
    seconds of untimed submits first (bench/stream_floor.py: an idle GPU's clocks come up slowly)."""
    from vkdecode.vk.descriptors import write_descriptor_set

    dev, dtype, x = case.dev, case.dtype, case.x
    (call,) = op_calls(_program(dtype, case.out, case.n_in, case.xrows), 0, caps)  # one binding on real GPUs
    pipe = dev.pipeline(
        call.shader,
        spec=call.spec,
        defines={**dict(call.defines), **(defines or {})},
        n_bindings=len(call.bindings),
        push_size=len(call.push),
    )
    pool = dev.descriptor_pool(case.copies, case.copies * len(call.bindings))
    sets = []
    for b in case.bufs:
        d = pool.allocate(pipe)
        write_descriptor_set(
            dev,
            d,
            [(b[p], 0, b[p].size) for p in weight_parts(dtype)] + [(x, 0, x.size), (case.y, 0, case.y.size)],
        )
        sets.append(d)

    def record(cmd, c, _bar):
        cmd.bind(pipe, sets[c])
        cmd.push(pipe, call.push)
        cmd.dispatch(*call.groups)

    times = chain_times(dev, reps, case.copies, barrier, record, warm_s=warm_s)
    pool.close()
    med = float(np.median(times))
    return {
        "dtype": dtype,
        "out": case.out,
        "in": case.n_in,
        "wg": call.spec[0],
        "rows": call.spec[3],
        "xrows": case.xrows,
        "barrier": barrier,
        "copies": case.copies,
        "weight_bytes": case.wbytes,
        "us": med / 1e3,
        "us_min": min(times) / 1e3,
        "us_max": max(times) / 1e3,
        "GBps": case.wbytes / med,
        "bits_per_weight": 8 * case.wbytes / (case.out * case.n_in),
        "Gweights_per_s": case.out * case.n_in / med,
        "pipeline_stats": pipe.stats,
    }


def copy_bandwidth(dev, nbytes: int = 512 << 20, reps: int = 5) -> float:
    """GB/s (read + write bytes) of vkCmdCopyBuffer, best of 4: vkdecode.benchmark's measurement, which
    bench/run_all.py and bench/decode_breakdown.py use too."""
    from vkdecode.benchmark import copy_bandwidths

    return copy_bandwidths(dev, nbytes, reps)["vkCmdCopyBuffer"]


def _variants(ab: str) -> list[dict]:
    """--ab "A,B=2,C+D,caps:kwide=-1": the default, then -DA, -DB=2, -DC -DD, and KernelCaps(kwide=-1)."""
    return [{}] + [
        {k: v or 1 for k, _, v in (kv.partition("=") for kv in item.split("+"))}
        for item in ab.split(",")
        if item
    ]


def _stats_text(stats: dict) -> str:
    """The driver's register and instruction counts and local memory, where
    VKDECODE_PIPELINE_STATS=1 captured them."""
    keep = {
        k: v for k, v in stats.items() if any(w in k.lower() for w in ("register", "instruction", "spill"))
    }
    if local := local_memory_bytes(stats):
        keep["local memory B"] = local
    return ("  [" + ", ".join(f"{k}: {v}" for k, v in keep.items()) + "]") if keep else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="all", choices=sorted(PRESETS))
    ap.add_argument("--sweep", action="store_true", help="also try workgroup sizes x rows per workgroup")
    ap.add_argument("--sweep-wg", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--sweep-rows", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--barrier", default="full", choices=["full", "compute", "none"])
    ap.add_argument("--only", default="", help="substring of 'dtype-outxin' to keep")
    ap.add_argument(
        "--copies",
        type=int,
        default=0,
        help="weight copies rotated over (default: enough to exceed L2; 1: weights L2-resident)",
    )
    ap.add_argument(
        "--ab",
        default="",
        help="DEFINE[,DEFINE2..]: also time each tuning with each -DDEFINE "
        "(caps:KNOB=V: a KernelCaps knob), alternating A, B, A, B",
    )
    ap.add_argument(
        "--xrows", type=int, default=1, help="rows of x: a batched decode step's matmul (MV_XROWS)"
    )
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.vk import Device

    dev = Device()
    caps = KernelCaps.from_info(dev.info)
    res = {
        "device": dev.info.name,
        "driver": dev.info.driver_version,
        "date": time.strftime("%Y-%m-%d"),
        "caps": caps.__dict__,
        "copy_GBps": copy_bandwidth(dev, min(512 << 20, caps.max_storage_range & ~0xFFFF)),
        "rows": [],
    }
    print(f"{res['device']} ({res['driver']}): buffer copy {res['copy_GBps']:.0f} GB/s", flush=True)
    tunings = [{}]
    if a.sweep:
        tunings += [{"matvec_wg": w, "matvec_rows": r} for w in a.sweep_wg for r in a.sweep_rows]
    for dtype, out, n_in, what in PRESETS[a.preset]:
        if a.only not in f"{dtype}-{out}x{n_in}":
            continue
        case = Case(dev, dtype, out, n_in, a.copies, a.xrows)
        # untimed: on the H100 the first measurements of fresh buffers ran ~1.6x slow (first touch)
        measure(case, caps, a.reps, a.barrier)
        runs = [(t, d) for t in tunings for d in _variants(a.ab) * (2 if a.ab else 1)]
        for t, d in runs:
            ct = {k[5:]: int(v) for k, v in d.items() if k.startswith("caps:")}
            r = measure(
                case,
                replace(caps, **t, **ct),
                a.reps,
                a.barrier,
                {k: v for k, v in d.items() if not k.startswith("caps:")},
            )
            r.update(what=what, auto=not t, defines=d)
            res["rows"].append(r)
            print(
                f"{dtype:6s} {out:6d}x{n_in:<5d} {what:8s} x{case.xrows} wg {r['wg']:3d} rows {r['rows']} "
                f"{r['us']:8.2f} us {r['GBps']:7.0f} GB/s {r['Gweights_per_s']:7.0f} Gw/s"
                f"{'  (auto)' if not t else ''} {' '.join(d)}{_stats_text(r['pipeline_stats'])}",
                flush=True,
            )
        case.close()
    dev.close()
    if a.out:
        write_json(res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GPU time of one prompt chunk, by kernel: where a chunk's milliseconds go (matmuls by kernel and
weight, attention, norms, rope, ...). The chunk is recorded once with a timestamp after every
region and run at a given position, as prefill runs it: every op its own kernel.
Writes JSON; never asserts timings.

    python -m bench.prefill_profile --shape qwen3-0.6b --quant f16 --width 512 --out $OUT/prof.json
    python -m bench.prefill_profile --shape qwen3-0.6b --quant f16 --width 512 --caps matmul_wide=-1 attn_rows_q=-1
    python -m bench.prefill_profile --shape tiny --width 16 --reps 1          # seconds, also on lavapipe
    python -m bench.prefill_profile --shape smollm2-135m --width 9 --tail all # a K=8 speculative verify step

Timestamps between dispatches include the barrier before each one, so per-kernel sums add up to
the chunk's GPU time; the median of `reps` runs per dispatch is reported.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

import numpy as np

from bench.matmul_rows_bench import WARM_SECONDS
from fusion.chunk import TOKENS, chunk_program
from vkdecode import benchmark as bench
from vkdecode.cli.bench import write_json
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.caps import parse_tuning
from vkdecode.vk.pipeline_stats import local_memory_bytes


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--shape", choices=sorted(bench.SHAPES), help="random weights of a real shape")
    src.add_argument("--model", help="a GGUF file or HF directory (bench.shape_gguf's files too)")
    ap.add_argument("--quant", default="q4_1")
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--pos", type=int, default=0, help="the chunk's first position")
    ap.add_argument("--caps", nargs="*", default=[], metavar="KEY=VALUE", help="KernelCaps tuning (A/B)")
    ap.add_argument(
        "--tail",
        default="kv",
        choices=["kv", "all"],
        help="kv: a prompt chunk; all: a speculative verify step (every row's logits and argmax)",
    )
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--layers", type=int, default=0, help="the shape's first N layers only (0: all)")
    ap.add_argument(
        "--fused", action="store_true", help="the chunk rules too (executors/prefill.chunk_executor)"
    )
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.executors.prefill import chunk_executor
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.vk import Device

    ctx = -(-(a.pos + a.width + 1) // 64) * 64
    model = (
        bench.file_model(a.model, ctx, 1)
        if a.model
        else bench.random_model(a.shape, a.quant, ctx, 1, n_layers=a.layers)
    )
    dev = Device()
    tuning = parse_tuning(a.caps)
    caps = KernelCaps.from_info(dev.info, **tuning)
    try:
        dec = ReplayExecutor(dev, model.program, model.weights, caps, fuse=False)
        prog = chunk_program(model.program, a.width, a.tail)
        ex = chunk_executor(
            "fused" if a.fused else "replay-nofuse", dev, prog, caps, [dec.plan], profile=True
        )
        ids = ex.plan.slices[(TOKENS, "data")]
        toks = np.random.default_rng(0).integers(0, model.args.vocab_size, a.width).tolist()
        ids.buffer.write_u32(ids.offset // 4, toks)
        runs = []
        # the first runs warm the driver's pipelines and bring the GPU's clock up from idle (an
        # H100 profiled cold ran every kernel ~4x slower): WARM_SECONDS of chunks, then time
        t_end = time.perf_counter() + WARM_SECONDS
        while time.perf_counter() < t_end:
            ex.step(int(toks[0]), a.pos)
        for _ in range(a.reps):
            ex.step(int(toks[0]), a.pos)
            runs.append(ex.region_times_us())
        per_region = [statistics.median(v) for v in zip(*runs)]
        # a region is one op: its kernels' shaders name it
        by_kernel: dict[str, dict] = {}
        rows = []
        for ri, us in enumerate(per_region):
            calls = [it.call for it in ex.items if it.region == ri]
            key = "+".join(sorted({c.shader for c in calls}))
            k = by_kernel.setdefault(key, {"us": 0.0, "count": 0})
            k["us"] += us
            k["count"] += 1
            rows.append(
                {
                    "region": ri,
                    "kernels": [c.shader for c in calls],
                    "label": calls[0].label if calls else "",
                    "groups": [list(c.groups) for c in calls],
                    "us": us,
                    # the driver's registers a lane etc. (VKDECODE_PIPELINE_STATS=1), per call
                    "pipeline_stats": [it.pipeline.stats for it in ex.items if it.region == ri],
                }
            )
        total = sum(per_region)
        out = {
            "model": model.describe(),
            "device": dev.info.name,
            "git_commit": bench.git_commit(),
            "date": time.strftime("%Y-%m-%d"),
            "width": a.width,
            "tail": a.tail,
            "pos": a.pos,
            "caps": tuning,
            "fused": a.fused,  # the chunk rules (older files: False, or narrow chunks that could fuse)
            "n_dispatches": len(ex.items),
            "chunk_gpu_ms": total / 1e3,
            "by_kernel": by_kernel,
            "dispatches": rows,
        }
        for key, k in sorted(by_kernel.items(), key=lambda kv: -kv[1]["us"]):
            print(
                f"{key:45s} {k['count']:4d} x  {k['us'] / 1e3:8.2f} ms  {100 * k['us'] / total:5.1f} %",
                flush=True,
            )
        print(
            f"{'chunk of ' + str(a.width) + ' rows':45s} {len(ex.items):4d} dispatches {total / 1e3:8.2f} ms",
            flush=True,
        )
        # kernels whose pipelines use local memory (VKDECODE_PIPELINE_STATS=1; a GPU driver's count)
        local: dict[str, int] = {}
        for it in ex.items:
            local[it.call.shader] = max(local.get(it.call.shader, 0), local_memory_bytes(it.pipeline.stats))
        for shader, n in sorted(local.items()):
            if n:
                print(f"local memory: {shader} {n} B an invocation", flush=True)
        ex.close()
        dec.close()
        dev.check_validation()
    finally:
        dev.close()
    if a.out:
        write_json(out, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Why the run summary's GPU µs/token could exceed its wall µs/token, measured: per-token figures of
pipelined fused decode, summarised the old way (medians of per-token wall intervals and GPU spans)
and the new way (decode wall time / tokens, GPU spans / tokens; vkdecode/generate.py).

    python -m bench.wall_vs_gpu [--shape smollm2-135m --quant q4_1] [--tokens 256] [--reps 5] [--out f.json]

In pipelined replay a token's wall interval is the time between two host wake-ups after two
fences, i.e. the GPU's step time plus the difference of two wake-up delays, so the median interval
can fall below the median GPU span; the mean interval (wall / tokens) cannot fall below the mean
span, since spans on one queue do not overlap. Writes JSON; never asserts timings."""

from __future__ import annotations

import argparse
import json
import statistics
import time


def run_once(ex, prompt: list[int], n: int) -> dict:
    ex.token_stats.clear()
    nxt = None
    for pos, t in enumerate(prompt):
        nxt = ex.step(t, pos)
    start = len(ex.token_stats)
    t0 = time.perf_counter()
    got = list(ex.decode(nxt, len(prompt), n))
    wall = time.perf_counter() - t0
    steps = ex.token_stats[start:]
    w, g = [s.wall_us for s in steps], [s.gpu_us for s in steps]
    return {
        "tokens": len(got),
        "old_median_wall_us": statistics.median(w),
        "old_median_gpu_us": statistics.median(g),
        "new_wall_us": wall * 1e6 / len(got),
        "new_gpu_us": sum(g) / len(g),
        "old_gpu_exceeds_wall": statistics.median(g) > statistics.median(w),
        "new_gpu_exceeds_wall": sum(g) / len(g) > wall * 1e6 / len(got),
        "intervals_below_their_span": sum(wi < gi for wi, gi in zip(w, g)) / len(w),
    }


def main(argv=None) -> int:
    from vkdecode import benchmark as bench
    from vkdecode.executors import make_executor
    from vkdecode.vk import Device

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="smollm2-135m")
    p.add_argument("--quant", default="q4_1")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)
    model = bench.random_model(a.shape, a.quant, a.tokens + 32, 16)
    out = {"shape": a.shape, "quant": a.quant, "runs": {}}
    with Device() as dev:
        out["device"] = dev.info.name
        for k in (1, 8):
            with make_executor("fused", dev, model.program, model.weights, tokens_per_submit=k) as ex:
                out["runs"][f"k{k}"] = [run_once(ex, model.prompt_ids, a.tokens) for _ in range(a.reps)]
    text = json.dumps(out, indent=2)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

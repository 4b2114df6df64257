"""GPU µs by op kind of one prompt chunk / speculative verify step (fusion/chunk.py), per width:
where a chunk's time goes (matmul, attention, rope, ...) and how many dispatches it takes.

    python -m bench.chunk_profile --shape smollm2-135m --quant q4_1 --widths 5 9 16 512 --tail all
Writes JSON (--out); never asserts timings."""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from vkdecode import bench


def profile_chunk(decode_ex, width: int, tail: str, pos: int, reps: int) -> dict:
    """Median GPU µs of the chunk step and per op kind (timestamps between its per-op regions)."""
    from fusion.chunk import TOKENS, chunk_program
    from vkdecode.executors.replay import ReplayExecutor
    prog = chunk_program(decode_ex.program, width, tail)
    ex = ReplayExecutor(decode_ex.device, prog, {}, decode_ex.caps, fuse=False, profile=True,
                        share=[decode_ex.plan])
    try:
        ids = ex.plan.slices[(TOKENS, "data")]
        ids.buffer.write_u32(ids.offset // 4, [1 + i % 7 for i in range(width)])
        samples, totals = [], []
        for _ in range(reps + 1):                    # the first run warms up the pipelines
            ex.step(1, pos)
            samples.append(ex.region_times_us())
            totals.append(ex.token_stats[-1].gpu_us)
        med = np.median(np.array(samples[1:]), axis=0)
        by: dict[str, dict] = {}
        for r, us, in zip(ex.regions, med):
            kind = prog.ops[r.ops[0]].kind
            e = by.setdefault(kind, {"us": 0.0, "dispatches": 0})
            e["us"] += float(us)
            e["dispatches"] += sum(1 for it in ex.items if it.region == ex.regions.index(r))
        return {"gpu_us": statistics.median(totals[1:]), "dispatches": len(ex.items),
                "by_op": dict(sorted(by.items(), key=lambda kv: -kv[1]["us"]))}
    finally:
        ex.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="smollm2-135m", choices=sorted(bench.SHAPES))
    ap.add_argument("--quant", default="q4_1")
    ap.add_argument("--widths", type=int, nargs="+", default=[5, 9, 16, 128, 512])
    ap.add_argument("--tail", default="all", choices=["all", "kv"], help="all: the verify step; kv: prefill")
    ap.add_argument("--pos", type=int, default=64, help="position of the chunk's first row")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--caps", nargs="*", default=[], metavar="KEY=INT",
                    help="KernelCaps overrides, e.g. attn_rows_tiled=-1 matmul_narrow=-1")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    over = {k: int(v) for k, v in (c.split("=", 1) for c in a.caps)}
    from vkdecode.executors import make_executor
    from vkdecode.kernels import KernelCaps
    from vkdecode.vk import Device
    ctx = a.pos + max(a.widths) + 1
    model = bench.random_model(a.shape, a.quant, ctx, 1)
    out = {"shape": a.shape, "quant": a.quant, "tail": a.tail, "pos": a.pos, "caps": over, "widths": {}}
    with Device() as dev:
        out["device"] = dev.info.name
        caps = KernelCaps.from_info(dev.info, **over)
        with make_executor("replay-nofuse", dev, model.program, model.weights, caps=caps) as dec:
            for w in a.widths:
                r = out["widths"][str(w)] = profile_chunk(dec, w, a.tail, a.pos, a.reps)
                print(f"{dev.info.name} {a.shape} {a.quant} width {w} ({a.tail}): {r['gpu_us']:9.1f} µs GPU, "
                      f"{r['dispatches']} dispatches", flush=True)
                for kind, e in r["by_op"].items():
                    print(f"    {kind:12s} {e['us']:9.1f} µs  {e['dispatches']} dispatches", flush=True)
        dev.check_validation()
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

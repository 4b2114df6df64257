"""Whole-model sweep of the matvec workgroup shape (KernelCaps.matvec_wg / matvec_rows) in fused
replay: tok/s and GPU µs per token for each shape, side by side in one process. It measures which
launch shape the dispatch chain prefers on a device; kernels.matvec_shape's defaults come from it.

    python -m bench.sweep_matvec_shapes --shape smollm2-135m --quant q4_1 [--out sweep.json]
Writes JSON; never asserts timings."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from vkdecode import benchmark as bench
from vkdecode.lowering.calls import KernelCaps
from vkdecode.vk.device import Device

GRID = [(0, 0), (32, 1), (64, 1), (128, 1), (32, 2), (64, 2), (32, 4), (64, 4), (128, 4), (32, 8), (64, 8)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--quant", default="q4_1")
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--grid", nargs="+", default=None, metavar="WG:ROWS", help="shapes (default: GRID)")
    ap.add_argument("--out")
    a = ap.parse_args()
    grid = [tuple(int(v) for v in g.split(":")) for g in a.grid] if a.grid else GRID
    model = bench.random_model(a.shape, a.quant, 1024, 16)
    rows = []
    with Device() as dev:
        base = KernelCaps.from_info(dev.info)
        for wg, rpw in grid:
            r = bench.timed_fused(dev, model, replace(base, matvec_wg=wg, matvec_rows=rpw), a.n, a.reps)
            rows.append({"matvec_wg": wg, "matvec_rows": rpw, **r})
            tok_s, gpu = r["tok_s"], r["gpu_us"]
            print(
                f"{dev.info.name} {a.shape} {a.quant} wg={wg or 'auto':>4} rows={rpw or 'auto':>4}: "
                f"{tok_s['median']:8.1f} tok/s  GPU {gpu['median']:7.1f} us",
                flush=True,
            )
        same = all(r["tokens"] == rows[0]["tokens"] for r in rows)
        print("greedy tokens identical across shapes:", same)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(
                    {
                        "device": dev.info.name,
                        "shape": a.shape,
                        "quant": a.quant,
                        "rows": rows,
                        "tokens_agree": same,
                    },
                    f,
                    indent=2,
                )


if __name__ == "__main__":
    main()

"""Grouped expert matmul throughput over a prompt chunk (TFLOP/s of the chosen slots' work): an MoE
layer's gate / up / down over `rows` chunk rows of `k` chosen experts each, the slots grouped by
expert on the GPU (moe_group.comp + matmul_rows_coop or matmul_rows with MOE), per caps variant.
Also the same matmul on one dense weight of an expert's shape over a slot tile's rows, the rate
the grouped form would reach with no gather and no scatter. Writes JSON; never asserts timings.

    python -m bench.moe_matmul_bench --out $OUT/moe-mm.json
    python -m bench.moe_matmul_bench --variants default moe_tile=16 coop_tile=4x1:2x2 --out ...
    python -m bench.moe_matmul_bench --experts 8 --rows 16 --reps 1 --shapes gate   # lavapipe

A variant is a space-free list of KernelCaps overrides joined by ','; "default" is none.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

import numpy as np

from bench.matmul_rows_bench import finish, measure, time_calls
from fusion.ir import Program
from vkdecode.benchmark.shapes import random_weight
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.caps import parse_tuning
from vkdecode.lowering.ops import op_calls
from vkdecode.vk.pipeline_stats import stats_summary

# Qwen3-30B-A3B's experts (Q4_K_M: gate / up q4_k, down q6_k in some layers, q4_k in the rest)
SHAPES = {"gate": ("q4_k", 768, 2048), "down": ("q4_k", 2048, 768), "down6": ("q6_k", 2048, 768)}


def routed_ids(rows: int, e: int, k: int, rng) -> np.ndarray:
    """k distinct experts per row, uniform (a trained router is skewed; uniform is the even case)."""
    return np.argsort(rng.random((rows, e)), axis=1)[:, :k].astype(np.uint32).reshape(-1)


def grouped(dev, shape: tuple, e: int, rows: int, k: int, caps: KernelCaps, reps: int, weight) -> dict:
    """GPU time and TFLOP/s of the grouped expert matmul over rows x k slots of e experts."""
    dtype, out, n_in = shape
    p = Program("bench")
    p.meta["arch"] = "qwen3moe"
    p.value("w", (e, out, n_in), dtype, "weight")
    p.value("x", (rows * n_in,), "f32", "state")
    p.value("ids", (rows * k,), "u32", "state")
    p.value("y", (rows * k * out,), "f32", "output")
    p.op("moe_matmul", ["w", "x", "ids"], ["y"])
    rng = np.random.default_rng(rows)
    arrays = {("w", part): a for part, a in weight.parts.items()}
    arrays[("x", "data")] = rng.standard_normal(rows * n_in).astype(np.float32)
    arrays[("ids", "data")] = routed_ids(rows, e, k, rng)
    calls = op_calls(p, 0, caps)
    r = time_calls(dev, p, calls, arrays, reps)
    r["TFLOPs"] = 2 * rows * k * out * n_in / (r["us"] * 1e6)
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["gate", "down"], choices=sorted(SHAPES))
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--k", type=int, default=8, help="experts per row")
    ap.add_argument("--rows", type=int, nargs="+", default=[512])
    ap.add_argument("--variants", nargs="+", default=["default"])
    ap.add_argument(
        "--dense", action="store_true", help="also every slot's work on one expert's weight (no gather)"
    )
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.vk import Device

    dev = Device()
    base = KernelCaps.from_info(dev.info)
    res = {"device": dev.info.name, "date": time.strftime("%Y-%m-%d"), "caps": base.__dict__, "rows": []}
    for shape in a.shapes:
        dtype, out, n_in = SHAPES[shape]
        weight = random_weight(dtype, (a.experts, out, n_in), np.random.default_rng(0))
        for rows in a.rows:
            for v in a.variants:
                over = [] if v == "default" else v.split(",")
                try:
                    caps = replace(base, **parse_tuning(over))
                    r = grouped(dev, SHAPES[shape], a.experts, rows, a.k, caps, a.reps, weight)
                except ValueError as exc:  # a tile this device's shared memory does not hold
                    print(f"{shape} {v}: {exc}", file=sys.stderr)
                    continue
                r.update(shape=shape, dtype=dtype, out=out, n_in=n_in, rows=rows, variant=v)
                res["rows"].append(r)
                print(
                    f"{shape:5s} {dtype} {out}x{n_in} T {rows:4d} {v:28s} {r['us']:8.1f} us {r['TFLOPs']:6.1f} "
                    f"TFLOP/s {[(c['shader'], c['groups']) for c in r['calls']]} "
                    f"{[stats_summary(st) for st in r['pipeline_stats']]}",
                    flush=True,
                )
            if a.dense:  # every slot's work on one expert's weight (no gather / scatter), same FLOPs
                slots = rows * a.k
                r = measure(dev, dtype, out, n_in, slots, base, a.reps)
                r.update(shape=shape, dtype=dtype, out=out, n_in=n_in, rows=rows, variant="dense")
                r["TFLOPs"] = r.pop("GFLOPs") / 1e3
                res["rows"].append(r)
                print(
                    f"{shape:5s} {dtype} dense T {slots:5d} {r['us']:8.1f} us {r['TFLOPs']:6.1f} TFLOP/s",
                    flush=True,
                )
    return finish(dev, res, a.out)


if __name__ == "__main__":
    sys.exit(main())

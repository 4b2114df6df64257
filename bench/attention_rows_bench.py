"""Prompt-chunk attention time per chunk width and position: the per-row attention_rows against
attention_rows_gqa (the G query heads of a kv head share each K/V tile load) at each rows-per-
workgroup setting, and attention_rows_coop (tensor cores) where the device has cooperative matrices. Writes JSON; never asserts timings.

    python -m bench.attention_rows_bench --out $OUT/attn.json                 # Qwen3-0.6B and SmolLM2 heads
    python -m bench.attention_rows_bench --heads 9,3,64 --widths 32 --pos 0 --reps 2   # lavapipe

GPU time from timestamps over `reps` runs (a barrier after each); f16 KV caches (the default),
random contents. `attention_ms_per_chunk` = time x the model's layers.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

import numpy as np

from bench.matmul_rows_bench import time_calls
from fusion.ir import STEP_WORDS, Program
from vkdecode.cli.bench import write_json
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.caps import parse_tuning
from vkdecode.lowering.ops import op_calls

MODELS = {
    "qwen3-0.6b": ((16, 8, 128), 28),
    "smollm2-135m": ((9, 3, 64), 30),
    "llama3.2-1b": ((32, 8, 64), 16),
    "llama3.1-8b": ((32, 8, 128), 32),
    "qwen3-30b-a3b": ((32, 4, 128), 48),
}


def causal_flops(h: int, d: int, rows: int, pos: int) -> int:
    """Multiply-adds x 2 of a causal chunk: row t sees pos + t + 1 keys, QK^T and PV each 2 d."""
    return 4 * h * d * (rows * (pos + 1) + rows * (rows - 1) // 2)


def _program(h, kvh, d, rows, ctx) -> Program:
    p = Program("bench")
    p.value("q", (rows * h * d,), "f32", "state")
    p.value("kc", (ctx, kvh * d), "f16", "state")
    p.value("vc", (ctx, kvh * d), "f16", "state")
    p.value("step", (STEP_WORDS,), "u32", "step")
    p.value("o", (rows * h * d,), "f32", "output")
    p.op(
        "attention",
        ["q", "kc", "vc", "step"],
        ["o"],
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=d,
        scale=d**-0.5,
        rows=rows,
    )
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=sorted(MODELS), choices=sorted(MODELS))
    ap.add_argument("--heads", default="", help="H,KVH,D instead of --models (one layer)")
    ap.add_argument("--widths", type=int, nargs="+", default=[64, 128, 256, 512])
    ap.add_argument("--pos", type=int, nargs="+", default=[0, 1024], help="the chunk's first position")
    ap.add_argument(
        "--rows-q",
        type=int,
        nargs="*",
        default=[-1, 0, 4, 8, 16],
        help="KernelCaps.attn_rows_q settings (-1: per-row kernel, 0: auto)",
    )
    ap.add_argument("--no-coop", action="store_true", help="leave out attention_rows_coop (tensor cores)")
    ap.add_argument(
        "--coop-caps",
        nargs="*",
        default=[""],
        metavar="K=V,K=V",
        help="attention_rows_coop variants, each KernelCaps tuning and +DEFINEs for its shader "
        "(attn_subgroups=8,attn_bkv=48,+ATT_QK2; '': default)",
    )
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.vk import Device

    dev = Device()
    base = KernelCaps.from_info(dev.info)
    models = (
        {"custom": (tuple(int(v) for v in a.heads.split(",")), 1)}
        if a.heads
        else {m: MODELS[m] for m in a.models}
    )
    res = {"device": dev.info.name, "date": time.strftime("%Y-%m-%d"), "rows": []}
    rng = np.random.default_rng(0)
    for model, ((h, kvh, d), layers) in models.items():
        for pos in a.pos:
            for rows in a.widths:
                ctx = -(-(pos + rows) // 64) * 64
                p = _program(h, kvh, d, rows, ctx)
                step = np.zeros(STEP_WORDS, np.uint32)
                step[1] = pos
                arrays = {
                    ("q", "data"): rng.standard_normal(rows * h * d).astype(np.float32),
                    ("kc", "data"): rng.standard_normal(ctx * kvh * d).astype(np.float16),
                    ("vc", "data"): rng.standard_normal(ctx * kvh * d).astype(np.float16),
                    ("step", "data"): step,
                }
                variants = [("", replace(base, attn_rows_q=rq, attn_coop=-1)) for rq in a.rows_q]
                if base.coop_matrix and not a.no_coop:
                    for v in a.coop_caps:
                        tuning = parse_tuning([t for t in v.split(",") if t and not t.startswith("+")])
                        variants.append((v, replace(base, attn_coop=1, **tuning)))
                flops = causal_flops(h, d, rows, pos)
                for name, caps in variants:
                    rq = caps.attn_rows_q
                    try:
                        # "+NAME" in a variant: a define for the coop kernel (an experiment's switch)
                        extra = tuple((t[1:], "1") for t in name.split(",") if t.startswith("+"))
                        calls = [replace(c, defines=tuple(c.defines) + extra) for c in op_calls(p, 0, caps)]
                    except ValueError as e:  # a forced tile that does not fit: say so, go on
                        print(f"{model:12s} pos {pos:5d} T {rows:4d} {name}: {e}", flush=True)
                        continue
                    r = time_calls(dev, p, calls, arrays, a.reps)
                    r.update(
                        model=model,
                        heads=[h, kvh, d],
                        rows=rows,
                        pos=pos,
                        attn_rows_q=rq,
                        coop_caps=name,
                        tflops=flops / r["us"] / 1e6,
                        attention_ms_per_chunk=r["us"] * layers / 1e3,
                    )
                    res["rows"].append(r)
                    print(
                        f"{model:12s} pos {pos:5d} T {rows:4d} rows_q {rq:3d} {r['calls'][0]['shader']:20s} "
                        f"{name:28s} {r['us']:9.1f} us {r['tflops']:6.1f} TFLOP/s  x{layers} layers "
                        f"{r['attention_ms_per_chunk']:7.2f} ms",
                        flush=True,
                    )
    dev.check_validation()
    dev.close()
    if a.out:
        write_json(res, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

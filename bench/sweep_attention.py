"""Fused attention grid sweep in fused replay: splits per head (for head_dim >= 128) and the
folded vs separate combine, tok/s and GPU µs side by side in one process.

    python -m bench.sweep_attention --shape qwen3-0.6b --quant f16 [--out sweep.json]
Writes JSON; never asserts timings."""
from __future__ import annotations

import argparse
import json
from dataclasses import replace

import vkdecode.fused_attention as fa
from vkdecode import bench
from vkdecode.kernels import KernelCaps
from vkdecode.vk.device import Device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-0.6b")
    ap.add_argument("--quant", default="f16")
    ap.add_argument("--ctx", type=int, default=192)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    model = bench.random_model(a.shape, a.quant, a.ctx, 16)
    rows = []
    with Device() as dev:
        base = KernelCaps.from_info(dev.info)
        for splits in (1, 2, 4, 8):
            for fold in (True, False):
                if splits == 1 and not fold:
                    continue
                fa.MIN_SPLITS_D128 = splits
                r = bench.timed_fused(dev, model, replace(base, attn_fold_combine=fold), a.n, a.reps)
                rows.append({"min_splits_d128": splits, "fold": fold, **r})
                tok_s, gpu, n_disp = r["tok_s"], r["gpu_us"], r["dispatches"]
                print(f"{dev.info.name} {a.shape} {a.quant} ctx {a.ctx} splits>={splits} fold={fold!s:5}: "
                      f"{tok_s['median']:7.1f} tok/s  GPU {gpu['median']:7.1f} us  {n_disp} dispatches", flush=True)
        same = all(r["tokens"] == rows[0]["tokens"] for r in rows)
        print("greedy tokens identical across grids:", same)
        if a.out:
            with open(a.out, "w") as f:
                json.dump({"device": dev.info.name, "shape": a.shape, "quant": a.quant, "ctx": a.ctx,
                           "rows": rows, "tokens_agree": same}, f, indent=2)


if __name__ == "__main__":
    main()

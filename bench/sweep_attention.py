"""Fused attention grid sweep in fused replay: splits (workgroups) per head, caps.attn_splits, with
the o-projection combining the partials; tok/s and GPU µs side by side in one process.

    python -m bench.sweep_attention --shape qwen3-0.6b --quant f16 [--out sweep.json]
Writes JSON; never asserts timings."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from vkdecode import benchmark as bench
from vkdecode.lowering.calls import KernelCaps
from vkdecode.vk.device import Device


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen3-0.6b")
    ap.add_argument("--quant", default="f16")
    ap.add_argument("--ctx", type=int, default=192)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2, 4, 8, 16], help="0: automatic")
    ap.add_argument("--kernels", nargs="+", default=[""], help="attention kernel: sg, wg ('' automatic)")
    ap.add_argument("--wg", type=int, nargs="+", default=[0], help="attention workgroup sizes (0: automatic)")
    ap.add_argument(
        "--cx-rows",
        type=int,
        nargs="+",
        default=[0],
        help="rows per workgroup of the combining o-projection (0: automatic)",
    )
    ap.add_argument("--profile", action="store_true", help="also GPU µs by rule (separate executor)")
    ap.add_argument("--out")
    a = ap.parse_args()
    model = bench.random_model(a.shape, a.quant, a.ctx, 16)
    rows = []
    with Device() as dev:
        base = KernelCaps.from_info(dev.info)
        grid = [(k, s, c, w) for k in a.kernels for s in a.splits for c in a.cx_rows for w in a.wg]
        for kernel, splits, cx_rows, wg in grid:
            caps = replace(base, attn_kernel=kernel, attn_splits=splits, cx_rows=cx_rows, attn_wg=wg)
            r = bench.timed_fused(dev, model, caps, a.n, a.reps, a.profile)
            rows.append(
                {"attn_kernel": kernel, "attn_splits": splits, "cx_rows": cx_rows, "attn_wg": wg, **r}
            )
            tok_s, gpu, n_disp = r["tok_s"], r["gpu_us"], r["dispatches"]
            print(
                f"{dev.info.name} {a.shape} {a.quant} ctx {a.ctx} kernel {kernel or 'auto'} wg {wg or 'auto'} "
                f"splits {splits or 'auto'} "
                f"o-proj rows {cx_rows or 'auto'}: "
                f"{tok_s['median']:7.1f} tok/s  GPU {gpu['median']:7.1f} us  {n_disp} dispatches",
                flush=True,
            )
            for rule, e in r.get("region_us", {}).items():
                print(f"    {rule:36s} {e['us']:7.1f} us  {e['regions']} regions", flush=True)
        same = all(r["tokens"] == rows[0]["tokens"] for r in rows)
        print("greedy tokens identical across grids:", same)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(
                    {
                        "device": dev.info.name,
                        "shape": a.shape,
                        "quant": a.quant,
                        "ctx": a.ctx,
                        "rows": rows,
                        "tokens_agree": same,
                    },
                    f,
                    indent=2,
                )


if __name__ == "__main__":
    main()

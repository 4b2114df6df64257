"""Per-token decode time at a small position for several --ctx values, in one process: what the
attention grid costs when it is sized for a context the sequence has not reached.

    python -m bench.attention_ctx --ctx 256 4096 --prompt-tokens 16 -n 8          # default model
    python -m bench.attention_ctx --shape smollm2-135m --quant q4_1 --ctx 512 8192 -n 128 --reps 5
    python -m bench.attention_ctx --shape qwen3-0.6b --quant f16 --ctx 1280 8192 --prompt-tokens 1000 \
        --caps cx_rows=-1 attn_max_splits=8       # KernelCaps tuning over the device's defaults

Each ctx gets its own Program (the KV cache and the attention grid are sized by it) and executor per
mode; the prompt runs token by token, then -n pipelined greedy steps are timed (as vkdecode bench).
Writes JSON (--out); never asserts timings. Greedy tokens must agree across ctx values and modes."""

from __future__ import annotations

import argparse
import json
import os
import sys

from vkdecode import benchmark as bench


def run_ctx(dev, a, ctx: int) -> dict:
    from vkdecode.default_model import resolve_model
    from vkdecode.executors import make_executor

    if a.shape:
        model = bench.random_model(a.shape, a.quant, ctx, a.prompt_tokens)
    else:
        model = bench.file_model(resolve_model(a.model), ctx, a.prompt_tokens)
    out = {"ctx": ctx, "model": model.name, "quant": model.quant, "modes": {}}
    for mode in a.modes:
        base, kw = bench.parse_mode(mode)
        if a.caps:
            kw["caps"] = caps_with(dev, a.caps)
        with make_executor(base, dev, model.program, model.weights, **kw) as ex:
            for _ in range(a.warmup):
                bench.decode_run(ex, model.prompt_ids, a.n)
            runs = [bench.decode_run(ex, model.prompt_ids, a.n) for _ in range(a.reps)]
            profile = None
            if a.profile and base != "unfused":
                with make_executor(base, dev, model.program, model.weights, profile=True, **kw) as pex:
                    profile = bench.region_profile(pex, model.prompt_ids, a.n)
        r = {
            "tok_s": bench.spread([x["tok_s"] for x in runs]),
            "ms_per_token": bench.spread([1e3 / x["tok_s"] for x in runs]),
            "gpu_us": bench.spread([x["gpu_us"] for x in runs]),
            "dispatches": runs[0]["counters"].get("dispatches"),
            "descriptor_writes": runs[0]["counters"].get("descriptor_writes"),
            "recordings": runs[0]["counters"].get("command_buffer_recordings"),
            "tokens": runs[0]["tokens"],
        }
        if profile:
            r["region_us"] = profile
        out["modes"][mode] = r
        print(
            f"ctx {ctx:6d} {mode:14s} {r['ms_per_token']['median']:9.2f} ms/token "
            f"({r['tok_s']['median']:8.1f} tok/s)  GPU {r['gpu_us']['median']:9.1f} us",
            flush=True,
        )
        for rule, e in (profile or {}).items():
            print(f"    {rule:36s} {e['us']:9.1f} us  {e['regions']} regions", flush=True)
    return out


def caps_with(dev, settings: list[str]):
    """The device's KernelCaps with KEY=VALUE tuning (ints, else strings) over its defaults."""
    from vkdecode.lowering.calls import KernelCaps

    tuning = {}
    for kv in settings:
        key, _, value = kv.partition("=")
        tuning[key] = int(value) if value.lstrip("-").isdigit() else value
    return KernelCaps.from_info(dev.info, **tuning)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a .gguf or HF directory (default: the default model)")
    ap.add_argument("--shape", help="random weights of a bench shape (vkdecode.benchmark.shapes) instead")
    ap.add_argument("--quant", default="q4_1")
    ap.add_argument("--ctx", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--modes", nargs="+", default=["fused"])
    ap.add_argument("--prompt-tokens", type=int, default=16, help="positions before the timed steps")
    ap.add_argument("-n", type=int, default=8, help="timed steps per repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="also GPU µs by rule (replay modes)")
    ap.add_argument(
        "--caps",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="KernelCaps tuning, e.g. cx_rows=-1 attn_max_splits=8 (default: the device's)",
    )
    ap.add_argument("--out", help="JSON output path")
    a = ap.parse_args()
    from vkdecode.vk.device import Device

    results = []
    with Device() as dev:
        for ctx in a.ctx:
            results.append(run_ctx(dev, a, ctx))
        env = bench.environment(dev)
    toks = {(r["ctx"], m): x["tokens"] for r in results for m, x in r["modes"].items()}
    agree = len({tuple(t) for t in toks.values()}) == 1
    print("greedy tokens identical across ctx and modes:", agree)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(
                {"environment": env, "settings": vars(a), "tokens_agree": agree, "results": results},
                f,
                indent=1,
            )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())

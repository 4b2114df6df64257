"""Time to first token and prompt tokens per second: batched prefill (prompt chunks recorded once
per width, executors/prefill.py) against the token-by-token prompt, per mode and prompt length.
Writes one JSON; never asserts timings.

    python -m bench.prefill --shape smollm2-135m --quant q4_1 --lengths 128 512 2000 --out $OUT/p.json
    python -m bench.prefill --model model.gguf --lengths 512          # the same GGUF llama.cpp reads
    python -m bench.prefill --shape tiny --lengths 16 40 --reps 1     # seconds, also on lavapipe
    python -m bench.prefill --shape qwen3-0.6b --quant f16 --lengths 512 --caps matmul_wide=-1   # A/B

TTFT here is from the first prompt token written to the first new token read back (the prompt's
last token runs through the decode step); prompt tok/s = prompt tokens / TTFT, the figure
llama.cpp's `timings.prompt_per_second` reports. Token ids are random (seeded), so the prompt
length is exact whatever the tokenizer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

import numpy as np

from vkdecode import benchmark as bench
from vkdecode.cli.bench import write_json
from vkdecode.executors import MODES, make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.caps import parse_tuning


def time_prompt(dec, ids: list[int], reps: int, warmup: int) -> dict:
    """Median / min TTFT over reps of dec.run_prompt(ids) (positions from 0 each time), after warm-up."""
    ex = dec.executor
    times, gpu = [], []
    for r in range(warmup + reps):
        ex.token_stats.clear()
        if dec.prefill is not None:
            dec.prefill.chunks.clear()
        t0 = time.perf_counter()
        dec.run_prompt(ids, 0)
        dt = time.perf_counter() - t0
        if r >= warmup:
            times.append(dt)
            chunks = dec.prefill.chunks if dec.prefill is not None else []
            gpu.append(sum(c.stats.gpu_us for c in chunks) + sum(s.gpu_us for s in ex.token_stats))
    med = statistics.median(times)
    return {
        "ttft_ms": med * 1e3,
        "ttft_ms_min": min(times) * 1e3,
        "prompt_tok_s": len(ids) / med,
        "gpu_ms": statistics.median(gpu) / 1e3,
        "reps": reps,
        "chunks": [[c.width, c.tokens] for c in dec.prefill.chunks] if dec.prefill is not None else [],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="GGUF file or HF directory")
    src.add_argument("--shape", choices=sorted(bench.SHAPES), help="random weights of a real shape")
    ap.add_argument("--quant", default="q4_1", help="weight dtype for --shape")
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2000])
    ap.add_argument("--warm-s", type=float, default=1.0, help="seconds of prefill before the first timing")
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--widths", default="auto", help="chunk widths, comma separated, or auto")
    ap.add_argument(
        "--token-path-max",
        type=int,
        default=512,
        help="also time the token-by-token prompt (fused) for lengths up to this (0 = never)",
    )
    ap.add_argument(
        "--ctx",
        type=int,
        default=0,
        help="KV cache rows (0: the longest prompt, rounded up to 64; `vkdecode run` uses 4096)",
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument(
        "--caps",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="KernelCaps tuning for an A/B run, e.g. matmul_wide=-1 (the tiled chunk matmul) "
        "or matmul_tile=8x4 matmul_splitk=1",
    )
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None, help="JSON path (default: stdout only)")
    a = ap.parse_args(argv)
    ctx = a.ctx or -(-(max(a.lengths) + 1) // 64) * 64
    model = bench.random_model(a.shape, a.quant, ctx, 1) if a.shape else bench.file_model(a.model, ctx, 1)
    widths = None if a.widths == "auto" else tuple(int(w) for w in a.widths.split(","))
    rng = np.random.default_rng(0)
    prompts = {n: rng.integers(0, model.args.vocab_size, n).tolist() for n in a.lengths}
    from vkdecode.vk import Device

    dev = Device(a.device)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    tuning = parse_tuning(a.caps)
    caps = KernelCaps.from_info(dev.info, **tuning)
    out = {
        "model": model.describe(),
        "device": dev.info.name,
        "git_commit": bench.git_commit(),
        "ctx": ctx,
        "caps": tuning,
        "results": {},
    }
    try:
        for mode in a.modes:
            dec = Decoder(make_executor(mode, dev, model.program, model.weights, caps=caps))
            try:
                t0 = time.perf_counter()
                dec.set_prefill(widths)
                res = {"widths": list(dec.prefill.widths), "build_s": time.perf_counter() - t0}
                # H100: the first length measured after a pause ran ~4x slow (128 tokens 30.7 ms,
                # 7.8 ms when measured again last) although warm-up reps ran: keep the GPU busy
                # for a second first, so no length pays for its clocks coming up
                t_warm = time.perf_counter()
                while time.perf_counter() - t_warm < a.warm_s:
                    dec.run_prompt(prompts[max(prompts)], 0)
                for n, ids in prompts.items():
                    res[str(n)] = time_prompt(dec, ids, a.reps, a.warmup)
                    log(
                        f"{mode:14s} {n:5d} tokens: TTFT {res[str(n)]['ttft_ms']:9.1f} ms, "
                        f"{res[str(n)]['prompt_tok_s']:9.1f} tok/s, chunks {res[str(n)]['chunks']}"
                    )
                if mode == "fused" and a.token_path_max:
                    dec.prefill.close()
                    dec.prefill = None
                    tok = {}
                    for n, ids in prompts.items():
                        if n <= a.token_path_max:
                            tok[str(n)] = time_prompt(dec, ids, 1, 0)
                            log(
                                f"{'token-by-token':14s} {n:5d} tokens: TTFT {tok[str(n)]['ttft_ms']:9.1f} ms"
                            )
                    out["results"]["fused-token-by-token"] = tok
                out["results"][mode] = res
            finally:
                dec.close()
        dev.check_validation()
    finally:
        dev.close()
    write_json(out, a.out or "-")
    if a.out:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Aggregate tok/s of `Model.stream_generate_batch` (the in-process batched API, what `serve
--parallel` runs minus HTTP) for N prompts decoded together, beside `serve_load`'s figures for N
clients: where the two differ, the time goes to the server (its event loop, the GIL), not to the
batched steps. Writes JSON; never asserts timings.

    python -m bench.batch_api --model model.gguf --counts 1 4 8 16 --max-tokens 256 --out b.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import vkdecode


def run(model, n: int, max_tokens: int) -> dict:
    """One batch of n prompts, each to max_tokens (or EOS): tokens, seconds, tok/s."""
    prompts = [f"Tell me a story about the number {i}." for i in range(n)]
    t0 = time.perf_counter()
    tokens = sum(1 for _ in model.stream_generate_batch(prompts, max_tokens=max_tokens))
    s = time.perf_counter() - t0
    return {"n": n, "tokens": tokens, "s": round(s, 4), "tok_s": round(tokens / s, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 4, 8, 16])
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows = []
    with vkdecode.load(a.model, ctx=a.ctx) as m:
        m.batch()  # recorded and calibrated before timing (serve does this at start-up)
        for n in a.counts:
            runs = [run(m, n, a.max_tokens) for _ in range(a.reps + 1)][1:]
            best = statistics.median(r["tok_s"] for r in runs)
            rows.append({"n": n, "runs": runs, "median_tok_s": best})
            print(f"{n} prompts: {best:.0f} tok/s (median of {a.reps})", flush=True)
        res = {"bench": "batch_api", "model": a.model, "device": m.device.info.name, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

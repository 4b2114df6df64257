"""Aggregate decode tok/s of batched steps (executors/batch.py) per batch width, beside the plain
single-sequence decode (the fused step, pipelined), in one process on one device. Writes one
JSON; never asserts timings.

    python -m bench.batch_decode --out $OUT/b.json                        # SmolLM2 (the default model)
    python -m bench.batch_decode --model model.gguf --widths 1 2 4 8 16 32 --steps 32
    python -m bench.batch_decode --caps batch_matvec=-1    # A/B: the chunk matmuls on a CPU too

Each width runs full (that many sequences of the same 16-token prompt), so a step's tokens are
width tokens; tok/s = width * steps / wall seconds of the steps (prompts not counted). The JSON
keeps each width's tokens (row 0's, and whether every row chose the same) and the single
sequence's, so an A/B by --caps can show its tokens did not change.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from vkdecode.cli.bench import write_json
from vkdecode.default_model import resolve_model
from vkdecode.executors.batch import BatchDecode
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.models.loader import load_model
from vkdecode.options import DecodeOptions
from vkdecode.vk import Device


def by_kernel(ex) -> dict[str, float]:
    """GPU µs of the last step by kernel (the shaders of each region joined by +)."""
    out: dict[str, float] = {}
    for ri, us in enumerate(ex.region_times_us()):
        name = "+".join(sorted({it.call.shader for it in ex.items if it.region == ri}))
        out[name] = out.get(name, 0.0) + us
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="GGUF or HF dir (default: SmolLM2-135M Q4_1)")
    ap.add_argument("--widths", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--steps", type=int, default=12, help="timed steps per width (after one warm-up)")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument(
        "--prompt-tokens", type=int, default=16, help="each row's prompt: the steps run from that position"
    )
    ap.add_argument("--mode", default="fused")
    ap.add_argument("--caps", nargs="*", default=[], metavar="KEY=VALUE", help="KernelCaps overrides")
    ap.add_argument("--out", default=None, help="JSON file (default: stdout)")
    ap.add_argument("--ahead", action="store_true", help="send each step's next one ahead (serve's way)")
    ap.add_argument("--profile", action="store_true", help="also GPU µs per kernel of each width's last step")
    a = ap.parse_args(argv)
    path = resolve_model(a.model)
    m = load_model(path, ctx=a.ctx)
    ids = list(range(20, 20 + a.prompt_tokens))
    out = {"model": os.path.basename(path), "mode": a.mode, "ctx": a.ctx, "widths": {}}
    with Device() as dev:
        over = {k: int(v) for k, v in (c.split("=") for c in a.caps)}
        caps = KernelCaps.from_info(dev.info, **over)
        out["device"] = dev.info.name
        with Decoder.build(
            dev, m.program, m.weights, DecodeOptions(mode=a.mode, ctx=a.ctx, caps=caps)
        ) as dec:
            first = dec.run_prompt(ids, 0)
            list(dec.decode(first, len(ids), 2))
            t = time.perf_counter()
            alone = list(dec.decode(first, len(ids), a.steps))
            out["single_sequence_tok_s"] = len(alone) / (time.perf_counter() - t)
            out["single_sequence_tokens"] = [first] + alone
            with BatchDecode(dec, a.widths, profile=a.profile, pipelined=a.ahead) as b:
                for w in b.widths:
                    toks = [[b.join(ids, None)[1]] for _ in range(w)]
                    for r, tok in enumerate(b.step().values()):  # the rows are written; then steady state
                        toks[r].append(tok)
                    t = time.perf_counter()
                    steps = [b.step() for _ in range(a.steps)]
                    dt = time.perf_counter() - t
                    for step in steps:
                        for r, tok in enumerate(step.values()):
                            toks[r].append(tok)
                    gpu = sum(s.gpu_us for s in b.runners[w].token_stats[-a.steps :]) / a.steps
                    out["widths"][w] = {
                        "tok_s": w * a.steps / dt,
                        "ms_per_step": dt * 1e3 / a.steps,
                        "gpu_us": gpu,
                        # every row's greedy tokens (the same prompt): diff them across --caps A/B runs
                        "tokens": toks[0],
                        "rows_agree": all(r == toks[0] for r in toks),
                    }
                    print(
                        f"B={w}: {w * a.steps / dt:.1f} tok/s, {dt * 1e3 / a.steps:.0f} ms/step",
                        file=sys.stderr,
                    )
                    if a.profile:
                        out["widths"][w]["kernel_us"] = by_kernel(b.runners[w])
                        top = sorted(out["widths"][w]["kernel_us"].items(), key=lambda kv: -kv[1])[:6]
                        print("   ", ", ".join(f"{k} {us:.0f}" for k, us in top), file=sys.stderr)
                    for slot in list(b.rows):
                        b.leave(slot)
    if a.out:
        write_json(out, a.out)
    else:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

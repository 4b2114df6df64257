"""Speculative decode (prompt-lookup drafts, one replayed verify step of K+1 rows) against plain
fused decode at equal output: acceptance, tokens per verify step and decode tok/s, on tasks that
repeat their prompt (code editing, summarising a given text) and on free chat. Writes one JSON;
never asserts timings (it does report whether the outputs were identical).

    python -m bench.speculative --k 4 8 --tokens 128 --out $OUT/spec.json     # the default model
    python -m bench.speculative --model model.gguf --k 6 --tokens 64 --reps 1

Acceptance depends on what the model writes, so it needs real weights (the default SmolLM2
GGUF); --shape runs random weights of a real shape, where only the verify step's cost means
anything (the prompt is a random segment repeated, so drafts exist).
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
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder

CODE = """def mean_and_total(values):
    total = 0
    count = 0
    for value in values:
        total = total + value
        count = count + 1
    if count == 0:
        return 0, total
    return total / count, total
"""
TEXT = (
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is "
    "named after the engineer Gustave Eiffel, whose company designed and built the tower from 1887 "
    "to 1889. Locally nicknamed 'La dame de fer', it was constructed as the centrepiece of the 1889 "
    "World's Fair, and to crown the centennial anniversary of the French Revolution. Although "
    "initially criticised by some of France's leading artists and intellectuals for its design, it "
    "has since become a global cultural icon of France and one of the most recognisable structures "
    "in the world."
)
TASKS = {
    "code-edit": "Rename the variable `total` to `acc` in this Python function and print the whole "
    "function again:\n\n" + CODE,
    "summarise": "Repeat the key sentences of this text, then summarise it:\n\n" + TEXT,
    "free-chat": "Tell me a short story about a robot who learns to paint.",
}


def run_once(dec, ids, n, spec: bool) -> tuple[list[int], float]:
    ex = dec.executor
    nxt = dec.run_prompt(ids, 0)
    t0 = time.perf_counter()
    if spec:
        toks = list(dec.speculative.run(list(ids), nxt, len(ids), n))
    else:
        toks = list(ex.decode(nxt, len(ids), n))
    return [nxt] + toks, len(toks) / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF / HF dir (default: the default SmolLM2 GGUF)")
    ap.add_argument("--shape", default=None, choices=sorted(bench.SHAPES))
    ap.add_argument("--quant", default="q4_1")
    ap.add_argument("--k", type=int, nargs="+", default=[4, 8])
    ap.add_argument(
        "--no-draft-burst",
        type=int,
        nargs="+",
        default=[0],
        help="plain steps back to back at most where no draft is found (0: the default; "
        "several: each measured, keys -bN)",
    )
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    ctx = 1024
    if a.shape:
        model = bench.random_model(a.shape, a.quant, ctx, 1)
        rng = np.random.default_rng(0)
        seg = rng.integers(0, model.args.vocab_size, 40).tolist()
        prompts = {t: (seg * 3)[: 60 + 20 * i] for i, t in enumerate(a.tasks)}
        program, weights, name = model.program, model.weights, model.name
    else:
        from vkdecode.default_model import resolve_model
        from vkdecode.models.loader import load_model

        path = resolve_model(a.model)
        lm = load_model(path, ctx=ctx)
        tok = lm.tokenizer
        prompts = {
            t: tok.encode(
                tok.apply_chat_template([{"role": "user", "content": TASKS[t]}], add_generation_prompt=True)
            )
            for t in a.tasks
        }
        program, weights, name = lm.program, lm.weights, os.path.basename(path)
    from vkdecode.vk import Device

    dev = Device(a.device)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    out = {
        "model": name,
        "device": dev.info.name,
        "git_commit": bench.git_commit(),
        "tokens": a.tokens,
        "results": {},
    }
    try:
        dec = Decoder(make_executor("fused", dev, program, weights))
        try:
            dec.set_prefill()
            for task, ids in prompts.items():
                run_once(dec, ids, min(8, a.tokens), False)  # warm-up (pipelines, driver JIT)
                plain = [run_once(dec, ids, a.tokens, False) for _ in range(a.reps)]
                r = {"prompt_tokens": len(ids), "plain_tok_s": statistics.median(s for _, s in plain)}
                runs = [(k, p, b) for k in a.k for p in ("always", "cost") for b in a.no_draft_burst]
                for k, policy, burst in runs:
                    # always: every draft checked (the acceptance figures); cost: checked while
                    # checking pays (VerifyPolicy, what `vkdecode run --speculative` does)
                    key = (f"k{k}" if policy == "always" else f"k{k}-cost") + (f"-b{burst}" if burst else "")
                    dec.set_speculative(k, always_verify=policy == "always", no_draft_burst=burst)
                    run_once(dec, ids, min(8, a.tokens), True)
                    dec.speculative.stats = type(dec.speculative.stats)()
                    sp = [run_once(dec, ids, a.tokens, True) for _ in range(a.reps)]
                    st = dec.speculative.stats.as_dict()
                    r[key] = dict(
                        st,
                        tok_s=statistics.median(s for _, s in sp),
                        identical=all(t == plain[0][0] for t, _ in sp),
                    )
                    r[key]["speedup"] = r[key]["tok_s"] / r["plain_tok_s"]
                    log(
                        f"{task:10s} K={k} {policy:6s} burst {burst}: plain {r['plain_tok_s']:7.1f} tok/s, speculative "
                        f"{r[key]['tok_s']:7.1f} tok/s (x{r[key]['speedup']:.2f}), acceptance "
                        f"{100 * st['acceptance_rate']:.0f}%, {st['tokens_per_verify']:.2f} tokens/verify, "
                        f"{st['declined']} drafts declined, identical {r[key]['identical']}"
                    )
                out["results"][task] = r
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

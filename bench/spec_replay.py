"""Speculative decode replayed offline: the greedy outputs of plain decode (one run per task of
bench/speculative.py) put through the prompt-lookup drafter, counting what a speculative run
would do: tokens with no draft, verify steps, drafts accepted, and the speed-up over plain decode
under a cost model (a waited-for round trip of `--round-trip` plain steps, a verify step of
`--verify` plain steps, plain decode at 8 steps a submit). Draftless turns run as one step or in
growing bursts (`--no-draft-burst`, as executors/speculative.py). Acceptance does not depend on the
device (greedy tokens do not), so lavapipe gives the same counts as a GPU; the speed-ups are the
model's, not measurements. Writes one JSON.

    python -m bench.spec_replay --tokens 128 --out spec-replay.json
    python -m bench.spec_replay --tokens 32 --tasks code-edit      # a minute on lavapipe
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from bench.speculative import TASKS
from vkdecode.cli.bench import write_json
from vkdecode.executors.speculative import PromptLookup


def replay(
    prompt: list[int], gen: list[int], k: int, max_burst: int, round_trip: float, verify: float
) -> dict:
    """What a speculative run (every draft checked) does on gen, the greedy tokens after prompt
    (gen[0]: the prompt's next token, already known when decoding starts)."""
    look = PromptLookup(k)
    look.extend(prompt)
    look.extend(gen[:1])
    i, cost, burst = 1, 0.0, 1
    c = {"verify_steps": 0, "accepted": 0, "drafted": 0, "draftless_tokens": 0, "draftless_turns": 0}
    while i < len(gen):
        drafts = look.draft()
        if not drafts:
            n = min(burst, len(gen) - i)
            cost += round_trip + n
            c["draftless_tokens"] += n
            c["draftless_turns"] += 1
            look.extend(gen[i : i + n])
            i += n
            burst = min(max_burst, 2 * burst)
            continue
        burst = 1
        n = 0
        while n < len(drafts) and i + n < len(gen) and drafts[n] == gen[i + n]:
            n += 1
        c["verify_steps"] += 1
        c["accepted"] += n
        c["drafted"] += len(drafts)
        cost += round_trip + verify
        look.extend(gen[i : i + n + 1])
        i += n + 1
    plain = (len(gen) - 1) * (1.0 + round_trip / 8)
    return dict(c, tokens=len(gen) - 1, speedup_model=plain / cost)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF / HF dir (default: the default SmolLM2 GGUF)")
    ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--k", type=int, nargs="+", default=[8])
    ap.add_argument("--no-draft-burst", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--round-trip", type=float, default=0.7, help="a waited-for submit, in plain steps")
    ap.add_argument("--verify", type=float, default=2.5, help="a K+1-row verify step, in plain steps")
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    from vkdecode.default_model import resolve_model
    from vkdecode.executors import make_executor
    from vkdecode.executors.decoder import Decoder
    from vkdecode.models.loader import load_model
    from vkdecode.vk import Device

    path = resolve_model(a.model)
    lm = load_model(path, ctx=1024)
    tok = lm.tokenizer
    dev = Device(a.device)
    out = {"model": os.path.basename(path), "device": dev.info.name, "settings": vars(a), "tasks": {}}
    try:
        with Decoder(make_executor("fused", dev, lm.program, lm.weights)) as dec:
            dec.set_prefill()
            for task in a.tasks:
                chat = [{"role": "user", "content": TASKS[task]}]
                ids = tok.encode(tok.apply_chat_template(chat, add_generation_prompt=True))
                nxt = dec.run_prompt(ids, 0)
                gen = [nxt] + list(dec.executor.decode(nxt, len(ids), a.tokens - 1))
                rows = []
                for k in a.k:
                    for b in a.no_draft_burst:
                        r = dict(k=k, no_draft_burst=b, **replay(ids, gen, k, b, a.round_trip, a.verify))
                        rows.append(r)
                        print(
                            f"{task:10s} K={k} burst {b:2d}: {r['draftless_tokens']:3d} of {r['tokens']} tokens "
                            f"without a draft ({r['draftless_turns']} turns), {r['verify_steps']} verifies, "
                            f"{r['accepted']} / {r['drafted']} accepted, model x{r['speedup_model']:.2f}",
                            flush=True,
                        )
                out["tasks"][task] = {"prompt_tokens": len(ids), "greedy": gen, "replays": rows}
        dev.check_validation()
    finally:
        dev.close()
    write_json(out, a.out or "-")
    return 0


if __name__ == "__main__":
    sys.exit(main())

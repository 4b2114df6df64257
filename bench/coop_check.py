"""The tensor-core prompt path against the f32 kernels and the numpy reference on one model file:
the logits at the prompt's last position and the greedy tokens after it. Written for Gemma 3 on
the tensor cores (its matmul inputs scaled per row into f16's range, Architecture.coop_row_scale)
with real weights, which reach the device machine trimmed (bench/trim_gguf.py). Writes one JSON;
exits 1 when a path's greedy tokens differ from the reference's.

    python -m bench.coop_check model.gguf --prompt-tokens 600 --decode 16 --out $OUT/check.json

Token ids are random (seeded) below the vocabulary size, so the prompt length is exact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

import numpy as np

from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference
from vkdecode.vk import Device

# path name -> caps knobs: the default (tensor cores where the device has them) and the f32 kernels
PATHS = {"coop": {}, "f32": {"matmul_coop": -1, "attn_coop": -1}}


def run_path(dev, m, caps: KernelCaps, toks: list[int], decode: int) -> dict:
    with Decoder(make_executor("fused", dev, m.program, m.weights, caps=caps)) as dec:
        dec.set_prefill()  # the device's default chunk widths
        t0 = time.perf_counter()
        first = dec.run_prompt(toks, 0)
        ttft = time.perf_counter() - t0
        logits = dec.executor.read_logits().astype(np.float64)
        shaders = sorted({it.call.shader for r in dec.prefill.runners.values() for it in r.items})
        scaled = any(
            ("X_ROWSCALE", "1") in it.call.defines for r in dec.prefill.runners.values() for it in r.items
        )
        gen = dec.decode(first, len(toks), decode - 1)
        ids = [first] + [int(t) for t in gen]
    return {"logits": logits, "ids": ids, "ttft_s": ttft, "chunk_shaders": shaders, "row_scaled": scaled}


def reference_path(m, toks: list[int], decode: int) -> dict:
    ref = Reference(m.program, m.weights)
    for pos, t in enumerate(toks):
        r = ref.step(t, pos)
    logits, ids = np.asarray(r["logits"], np.float64), [int(r["next_token"][0])]
    for pos in range(len(toks), len(toks) + decode - 1):
        ids.append(int(ref.step(ids[-1], pos)["next_token"][0]))
    return {"logits": logits, "ids": ids}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--prompt-tokens", type=int, default=600)
    ap.add_argument("--decode", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    m = load_model(a.model, ctx=a.prompt_tokens + a.decode + 1)
    vocab = m.program.values["logits"].numel
    toks = [int(t) for t in np.random.default_rng(a.seed).integers(3, vocab, a.prompt_tokens)]
    t0 = time.perf_counter()
    want = reference_path(m, toks, a.decode)
    out = {"model": a.model, "arch": m.program.meta.get("arch"), "prompt_tokens": len(toks), "paths": {}}
    out["reference"] = {"ids": want["ids"], "seconds": round(time.perf_counter() - t0, 1)}
    ok = True
    with Device() as dev:
        for name, knobs in PATHS.items():
            r = run_path(dev, m, KernelCaps.from_info(dev.info, **knobs), toks, a.decode)
            rel = float(np.abs(r["logits"] - want["logits"]).max() / np.abs(want["logits"]).max())
            same = r["ids"] == want["ids"]
            ok &= same
            out["paths"][name] = {
                "ids": r["ids"],
                "ids_equal_reference": same,
                "logits_max_rel_err": rel,
                "argmax_equal": int(r["logits"].argmax()) == int(want["logits"].argmax()),
                "ttft_ms": round(1e3 * r["ttft_s"], 2),
                "chunk_shaders": r["chunk_shaders"],
                "row_scaled": r["row_scaled"],
            }
            print(f"{name:5s} ids equal: {same}  logits rel err {rel:.2e}  row-scaled: {r['row_scaled']}")
        out["device"] = dev.info.name
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

"""What rounding every matmul's input to f16 does to a model (the tensor-core kernels read f16 x
and f16 weights, accumulating in f32), and whether a per-row power-of-two pre-scale saves it:
numpy only, on vkdecode.reference, no GPU. Written for issue 32's Gemma question: its activations
overflow f16, so Gemma is refused the tensor cores (Architecture.coop).

Variants, each run over the same tokens (the f32 run's greedy continuation of the prompt):
  f32       the reference as it is
  f16       x and the weights rounded to f16 (|x| > 65504 becomes inf, as a conversion does)
  f16-row   x divided by a power of two per row (so max |x| <= 2^14) before rounding, the product
            multiplied back: exact scaling, so only f16's precision remains
  f16-shiftN x divided by 2^N before rounding and the product multiplied back (N fixed per
            architecture: the tensor-core kernels' X_SHIFT, Architecture.coop_x_shift); small
            values lose precision to f16's subnormals instead of large ones overflowing
  bf16      x rounded to bf16 (8 exponent bits: no overflow, 8 mantissa bits), weights f16

Per variant: the logits' relative error against f32 (max over positions), the positions whose
argmax differs, and per matmul weight the largest |x| seen and how many elements overflowed f16.

  python -m bench.f16_inputs MODEL.gguf --prompt "..." --decode 32 --out f16.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from vkdecode import reference
from vkdecode.models import build_program
from vkdecode.models.tokenizer import Tokenizer
from vkdecode.models.weights import load_weights, open_gguf

F16_MAX = 65504.0
ROW_MAX_EXP = 14  # f16-row: rows scaled so max |x| <= 2^14, leaving headroom in the f32 sums


def _bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even at bf16 (the top 16 bits of an f32)."""
    u = x.astype(np.float32).view(np.uint32)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.view(np.float32)


def _round_x(x: np.ndarray, variant: str) -> tuple[np.ndarray, float]:
    """-> (x as the kernel would read it, the factor to multiply the product by)."""
    if variant == "bf16":
        return _bf16(x), 1.0
    if variant.startswith("f16-shift"):
        s = 2.0 ** int(variant[len("f16-shift") :])
        with np.errstate(over="ignore"):
            return (x / np.float32(s)).astype(np.float16).astype(np.float32), s
    if variant == "f16-row":
        top = float(np.abs(x).max())
        s = 2.0 ** max(0, int(np.ceil(np.log2(top))) - ROW_MAX_EXP) if top > 0 else 1.0
        return (x / np.float32(s)).astype(np.float16).astype(np.float32), s
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32), 1.0


def run(path: str, tokens: list[int], variant: str, ctx: int) -> dict:
    args, weights, _ = load_weights(path)
    program = build_program(args, ctx, {k: w.dtype for k, w in weights.items()})
    ref = reference.Reference(program, weights)
    mats = {op.inputs[0] for op in program.ops if op.kind == "matmul"}
    if variant != "f32":  # the coop loader decodes weights to f16 (within an ulp)
        for name in mats:
            ref.weights[name] = ref.weights[name].astype(np.float16).astype(np.float32)
    seen: dict[str, list] = {m: [0.0, 0] for m in mats}
    values: dict[str, float] = {}  # every f32 activation's largest |value| by kind (name after "layers.i.")
    plain = reference.run_op

    def run_op(op, prog, env, dtype=np.float32):
        if op.kind != "matmul":
            out = plain(op, prog, env, dtype)
            for name, v in out.items():
                if prog.values[name].dtype == "f32" and prog.values[name].kind != "state":
                    kind = name.split(".", 2)[-1]
                    values[kind] = max(values.get(kind, 0.0), float(np.abs(v).max()))
            return out
        x = np.asarray(env[op.inputs[1]], np.float32)
        s = seen[op.inputs[0]]
        s[0], s[1] = max(s[0], float(np.abs(x).max())), s[1] + int((np.abs(x) > F16_MAX).sum())
        if variant == "f32":
            return plain(op, prog, env, dtype)
        xr, scale = _round_x(x, variant)
        out = plain(op, prog, {**env, op.inputs[1]: xr}, dtype)
        return {k: v * np.float32(scale) for k, v in out.items()}

    reference.run_op = run_op
    try:
        logits = np.array([ref.step(t, pos)["logits"] for pos, t in enumerate(tokens)])
    finally:
        reference.run_op = plain
    return {"logits": logits, "max_abs_x": {m: seen[m] for m in sorted(mats)}, "max_abs_values": values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a GGUF file or HF directory")
    ap.add_argument("--prompt", default="The history of the printing press begins in")
    ap.add_argument("--decode", type=int, default=32, help="greedy tokens after the prompt (f32 run)")
    ap.add_argument("--variants", nargs="+", default=["f32", "f16", "f16-row", "bf16"])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    tok = (
        Tokenizer.from_gguf(open_gguf(a.model), a.model)
        if a.model.endswith(".gguf")
        else Tokenizer.from_hf_dir(a.model)
    )
    prompt = tok.encode_prompt(a.prompt)
    ctx = len(prompt) + a.decode + 1
    # the f32 run's greedy continuation: every variant then sees the same tokens
    args, weights, _ = load_weights(a.model)
    ref = reference.Reference(build_program(args, ctx, {k: w.dtype for k, w in weights.items()}), weights)
    tokens = list(prompt)
    for pos in range(len(prompt) + a.decode - 1):
        nxt = int(ref.step(tokens[pos], pos)["next_token"][0])
        if pos + 1 >= len(tokens):
            tokens.append(nxt)
    del ref, weights
    results, base = {}, None
    for v in a.variants:
        t0 = time.perf_counter()
        r = run(a.model, tokens, v, ctx)
        if base is None:
            base = r["logits"]
        err = np.abs(r["logits"] - base).max(axis=1) / np.abs(base).max(axis=1)
        finite = bool(np.isfinite(r["logits"]).all())
        flips = [int(i) for i in np.flatnonzero(r["logits"].argmax(axis=1) != base.argmax(axis=1))]
        results[v] = {
            "finite": finite,
            "max_rel_err": float(np.nanmax(err)) if finite else None,
            "argmax_flips": flips,
            "max_abs_x": r["max_abs_x"],
            "max_abs_values": r["max_abs_values"],
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(
            f"{v:8s} finite={finite} max rel err={results[v]['max_rel_err']} flips={len(flips)}/{len(tokens)}"
        )
    worst = (
        sorted(results["f32"]["max_abs_x"].items(), key=lambda kv: -kv[1][0])[:8] if "f32" in results else []
    )
    for name, (top, over) in worst:
        print(f"  {name:32s} max |x| {top:12.1f}  over f16: {over}")
    if "f32" in results:
        big = sorted(results["f32"]["max_abs_values"].items(), key=lambda kv: -kv[1])[:8]
        print("  largest activations (not matmul inputs): " + ", ".join(f"{k} {v:.0f}" for k, v in big))
    out = {"model": a.model, "prompt_tokens": len(prompt), "tokens": len(tokens), "variants": results}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

"""Interleaved A/B of modes and KernelCaps variants on one device: every variant's executor is
built once, then rounds alternate between them (n steps each), so a shared, noisy machine (lavapipe
on a few busy cores) slows every variant alike. GPU µs per token from timestamps (per region, summed
from timestamps around the whole step, medians over all steps, and tok/s per round (steps one at
a time in every mode). With --detail the replay modes are profiled instead: GPU µs per region,
summed by rule and kernel; lavapipe's region timestamps then cost time of their own, more for the
per-op modes' ~3x more regions, so compare totals from runs without --detail.

    python -m bench.ab_modes fused replay-nofuse unfused "fused:matvec_wg=0,attn_wg=0" \
        [--model X.gguf | --shape smollm2-135m --quant q4_1] [--ctx 64] [--prompt-tokens 4] [--out ab.json]

A variant is MODE or MODE:KNOB=V,KNOB=V (KernelCaps fields over KernelCaps.from_info's defaults);
a repeated variant runs again as its own executor, labelled VARIANT#2, ...: two identical plans in
one process tell the noise. Each executor allocates its own buffers, and on an H100 identical plans
have differed by up to 1.7% of the 8B step with where those land; --rebuild builds every variant's
executor afresh each round (closing the last), so placements rotate between variants instead of
sticking to one.
VKDECODE_PIPELINE_STATS=1 also lists each kernel's registers where the driver reports them (NVIDIA).
Writes JSON; never asserts timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace

from vkdecode import benchmark as bench
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.caps import parse_tuning


def parse_variant(text: str) -> tuple[str, dict]:
    """'fused:router_ops=1,kwide=1' -> ('fused', {...}) through caps.parse_tuning (the --caps
    parser: bools take 1/true, and an unknown field is refused)."""
    mode, _, knobs = text.split("#")[0].partition(":")
    try:
        return mode, parse_tuning(list(filter(None, knobs.split(","))))
    except ValueError as e:
        raise SystemExit(f"{text}: {e}") from None


def quantile(xs: list[float], q: float) -> float:
    """The q-quantile (nearest rank): on a shared machine the low end tells the uncontended speed."""
    ys = sorted(xs)
    return ys[min(len(ys) - 1, int(q * len(ys)))]


def region_keys(ex) -> list[str]:
    """Per region: rule (or op) and its kernels with their workgroup size and grid, e.g.
    'MATMUL_ADD matmul_add/16x36'."""
    keys = []
    for ri, r in enumerate(ex.regions):
        its = [it for it in ex.items if it.region == ri]
        keys.append(
            (r.rule or r.name)
            + " "
            + " | ".join(f"{it.call.shader}/{it.call.spec[0]}x{it.call.groups[0]}" for it in its)
        )
    return keys


def labels(variants: list[str]) -> list[str]:
    """The variants, a repeat of one labelled VARIANT#2, #3, ... (its own executor and row)."""
    out, seen = [], {}
    for v in variants:
        seen[v] = seen.get(v, 0) + 1
        out.append(v if seen[v] == 1 else f"{v}#{seen[v]}")
    return out


def run(
    dev, model, variants: list[str], n: int, rounds: int, detail: bool = False, rebuild: bool = False
) -> list[dict]:
    from vkdecode.executors import make_executor

    base = KernelCaps.from_info(dev.info)
    variants = labels(variants)
    specs = []
    for v in variants:
        mode, tuning = parse_variant(v)
        specs.append((v, mode, replace(base, **tuning), detail and mode != "unfused"))
    built: dict[str, object] = {}

    def executor(v, mode, caps, profile):
        if v not in built:
            built[v] = make_executor(mode, dev, model.program, model.weights, caps=caps, profile=profile)
        return built[v]

    try:
        if not rebuild:  # every executor first, so none is built between timed rounds
            for spec in specs:
                executor(*spec)
        out = {
            v: {"variant": v, "step_us": [], "tok_s": [], "by_region": {}, "tokens": None} for v in variants
        }
        for _ in range(rounds):
            for v, mode, caps, profile in specs:
                ex = executor(v, mode, caps, profile)
                samples = []
                hook = (
                    (lambda ex=ex, s=samples: s.append(ex.region_times_us())) if profile else (lambda: None)
                )
                r = bench.decode_run(ex, model.prompt_ids, n, after_step=hook)
                o = out[v]
                o["tokens"] = r["tokens"]
                o["tok_s"].append(r["tok_s"])  # one step at a time (after_step), every mode alike
                o["step_us"] += [s.gpu_us for s in ex.token_stats[-n:]]
                keys = region_keys(ex) if profile else []
                for s in samples:
                    by: dict[str, float] = {}
                    for k, us in zip(keys, s):
                        by[k] = by.get(k, 0.0) + us
                    for k, us in by.items():
                        o["by_region"].setdefault(k, []).append(us)
                if rebuild:
                    built.pop(v).close()
    finally:
        for ex in built.values():
            ex.close()
    rows = []
    for v in variants:
        o = out[v]
        by = {k: statistics.median(xs) for k, xs in o["by_region"].items()}
        by_p10 = {k: quantile(xs, 0.1) for k, xs in o["by_region"].items()}
        rows.append(
            {
                "variant": v,
                "step_us": {**bench.spread(o["step_us"]), "p10": quantile(o["step_us"], 0.1)},
                "tok_s": bench.spread(o["tok_s"]),
                "tok_s_by_round": o["tok_s"],
                "tokens": o["tokens"],
                "region_us": dict(sorted(by.items(), key=lambda kv: -kv[1])),
                "region_us_p10": dict(sorted(by_p10.items(), key=lambda kv: -kv[1])),
            }
        )
    return rows


def pipeline_stats(dev) -> list[str]:
    """'shader spec defines: registers' of every pipeline the variants built, where the driver
    reported statistics (VKDECODE_PIPELINE_STATS=1, NVIDIA): occupancy is registers' business."""
    out = []
    for (shader, spec, defines, _, _), pipe in dev._pipelines.items():
        regs = {k: v for k, v in getattr(pipe, "stats", {}).items() if "register" in k.lower()}
        if regs:
            d = " ".join(k if v == "1" else f"{k}={v}" for k, v in defines if k != "USE_SUBGROUP")
            out.append(f"{shader} {spec[:4]} {d}: " + ", ".join(f"{k} {v}" for k, v in regs.items()))
    return sorted(out)


def main(argv=None) -> int:
    from vkdecode.cli.options import add_model_source_options, bench_model_from_args, open_device

    ap = argparse.ArgumentParser()
    ap.add_argument("variants", nargs="+", help="MODE[:KNOB=V,...]")
    add_model_source_options(ap)
    ap.add_argument("-n", type=int, default=4, help="timed steps per variant and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=4, help="steps before the timed ones")
    ap.add_argument("--detail", action="store_true", help="profile the replay modes: GPU µs by region kind")
    ap.add_argument(
        "--rebuild",
        action="store_true",
        help="build each variant's executor afresh every round (buffer placements rotate)",
    )
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    ctx = a.ctx or max(64, -(-(a.prompt_tokens + a.n) // 64) * 64)
    model = bench_model_from_args(a, ctx, a.prompt_tokens)
    with open_device(a.device) as dev:
        rows = run(dev, model, a.variants, a.n, a.rounds, a.detail, a.rebuild)
        name = dev.info.name
        stats = pipeline_stats(dev)
    for k in stats:
        print(f"        {k}")
    same = all(r["tokens"] == rows[0]["tokens"] for r in rows)
    for r in rows:
        s = r["step_us"]
        print(
            f"{s['median']:10.0f} GPU us/token (p10 {s['p10']:.0f}, min {s['min']:.0f}, n {s['n']})  "
            f"{r['tok_s']['median']:6.2f} tok/s  {r['variant']}"
        )
        if a.detail:
            for k, us in r["region_us"].items():
                print(f"        {us:9.0f} (p10 {r['region_us_p10'][k]:9.0f})  {k}")
    first = rows[0]["tok_s_by_round"]
    for r in rows[1:]:  # paired by round: both ran within seconds of each other
        ratios = [x / y for x, y in zip(first, r["tok_s_by_round"])]
        print(
            f"{rows[0]['variant']} / {r['variant']} tok/s by round: median {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
        )
    print("greedy tokens identical across variants:", same)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(
                {
                    "device": name,
                    "model": model.describe(),
                    "ctx": ctx,
                    "prompt_tokens": a.prompt_tokens,
                    "n": a.n,
                    "rounds": a.rounds,
                    "profiled": a.detail,
                    "rebuild": a.rebuild,
                    "rows": rows,
                    "tokens_agree": same,
                    "pipeline_stats": stats,
                },
                f,
                indent=1,
            )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

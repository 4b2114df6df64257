"""Timing decode modes: one mode (run_mode, decode_run), every mode with the figures `vkdecode bench`
reports (run_bench), and whether their greedy tokens agree."""

from __future__ import annotations

import statistics
import time

import numpy as np

from vkdecode.benchmark import memory
from vkdecode.benchmark.machine import copy_bandwidth, environment
from vkdecode.benchmark.model import BenchModel, weight_bytes_per_token
from vkdecode.stats import executed_per_token, host_calls_per_token, mean_counters

BASELINE = "unfused"


def spread(xs: list[float]) -> dict:
    return {
        "median": statistics.median(xs),
        "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "min": min(xs),
        "max": max(xs),
        "n": len(xs),
    }


# ---------------------------------------------------------------- one mode


def decode_run(ex, prompt_ids: list[int], n: int, after_step=None) -> dict:
    """Prompt through the step, then n greedy steps, timed; returns tokens and per-step figures.
    The timed steps go through ex.decode(), which replay pipelines (two steps in flight, the GPU
    feeding each step its token), as stream_generate does; after_step forces the waiting loop."""
    ex.token_stats.clear()  # keeps memory flat over many repetitions
    nxt = None
    for pos, t in enumerate(prompt_ids):
        nxt = ex.step(t, pos)
    start, tokens, pos = len(ex.token_stats), [nxt], len(prompt_ids)
    t0 = time.perf_counter()
    if after_step is None:
        tokens += list(ex.decode(nxt, pos, n))
    else:  # one step at a time: after_step reads that step's timestamps
        for p in range(pos, pos + n):
            tokens.append(ex.step(tokens[-1], p))
            after_step()
    wall = time.perf_counter() - t0
    steps = ex.token_stats[start:]
    counters = mean_counters(steps)
    k = getattr(ex, "tokens_per_submit", 1)
    return {
        "tokens": tokens,
        "tok_s": len(steps) / wall if wall > 0 else 0.0,
        # host enqueue per token: a submit's cost spread over the tokens it carries
        "host_us": statistics.median(s.host_us for s in steps)
        if k == 1
        else sum(s.host_us for s in steps) / len(steps),
        "gpu_us": statistics.median(s.gpu_us for s in steps),
        "wall_us": statistics.median(s.wall_us for s in steps),
        "counters": counters,
    }


def timed_fused(device, model: BenchModel, caps, n: int, reps: int, profile: bool = False) -> dict:
    """Fused replay built with `caps` (the bench/sweep_* scripts vary it): one warm-up run, then
    `reps` timed ones; tok/s and GPU µs spreads, the first run's tokens, dispatches per token, and
    with `profile` GPU µs by rule from a separate profiling executor."""
    from vkdecode.executors import make_executor

    with make_executor("fused", device, model.program, model.weights, caps=caps) as ex:
        decode_run(ex, model.prompt_ids, n)
        runs = [decode_run(ex, model.prompt_ids, n) for _ in range(reps)]
        out = {
            "tok_s": spread([r["tok_s"] for r in runs]),
            "gpu_us": spread([r["gpu_us"] for r in runs]),
            "tokens": runs[0]["tokens"],
            "dispatches": len(ex.items),
        }
    if profile:
        with make_executor("fused", device, model.program, model.weights, caps=caps, profile=True) as ex:
            out["region_us"] = region_profile(ex, model.prompt_ids, n)
    return out


def region_profile(ex, prompt_ids: list[int], n: int) -> dict:
    """GPU µs per region (timestamps between regions, no added barriers), median over n steps,
    summed by rule (unfused ops by their op name), with the rule's dispatches and weight bytes."""
    samples = []
    decode_run(ex, prompt_ids, n, after_step=lambda: samples.append(ex.region_times_us()))
    med = np.median(np.array(samples), axis=0)
    by: dict[str, dict] = {}
    for r, us, st in zip(ex.regions, med, ex.region_stats()):
        key = r.rule or r.name
        e = by.setdefault(key, {"us": 0.0, "regions": 0, "dispatches": 0, "weight_bytes": 0})
        e["us"] += float(us)
        e["regions"] += 1
        e["dispatches"] += st["dispatches"]
        e["weight_bytes"] += st["weight_bytes"]
    return dict(sorted(by.items(), key=lambda kv: -kv[1]["us"]))


def rule_read_rate(e: dict, copy_gbps: float) -> None:
    """A region_profile entry's weight read rate (GB/s over its GPU time) and its fraction of the
    device's copy rate (issue 33 asks >= 85% of the K-quant matvecs and the lm_head): None where
    the rule reads no weights or took no time."""
    gbps = e["weight_bytes"] / e["us"] / 1e3 if e["weight_bytes"] and e["us"] > 0 else None
    e["GBps"] = gbps
    e["fraction_of_copy"] = gbps / copy_gbps if gbps is not None and copy_gbps else None


def parse_mode(mode: str) -> tuple[str, dict]:
    """A bench mode: an executor mode, or "fused:k<K>" for fused replay with K tokens per submit."""
    base, _, k = mode.partition(":k")
    if k:
        if base != "fused" or not k.isdigit():
            raise ValueError(f"bad mode {mode!r}: only fused takes :k<tokens per submit>, e.g. fused:k8")
        return base, {"tokens_per_submit": int(k)}
    return base, {}


def run_mode(
    device,
    model: BenchModel,
    mode: str,
    n: int,
    reps: int,
    warmup: int,
    profile: bool = False,
    log=None,
    on_build=None,
) -> dict:
    """on_build(executor): called once the executor is built, before it runs (run_bench's memory)."""
    from vkdecode.executors import make_executor

    base, kw = parse_mode(mode)
    t0 = time.perf_counter()
    ex = make_executor(base, device, model.program, model.weights, **kw)
    try:
        build_s = time.perf_counter() - t0
        if on_build:
            on_build(ex)
        for _ in range(warmup):
            decode_run(ex, model.prompt_ids, n)
        runs = []
        for i in range(reps):
            runs.append(decode_run(ex, model.prompt_ids, n))
            if log:
                log(f"{mode}: rep {i + 1}/{reps} {runs[-1]['tok_s']:.1f} tok/s")
        out = {
            "mode": mode,
            "build_s": build_s,
            "tok_s": spread([r["tok_s"] for r in runs]),
            "host_us": spread([r["host_us"] for r in runs]),
            "gpu_us": spread([r["gpu_us"] for r in runs]),
            "wall_us": spread([r["wall_us"] for r in runs]),
            "executed_per_token": executed_per_token(ex),
            "host_calls_per_token": host_calls_per_token(runs[-1]["counters"]),
            "counters_per_token": runs[-1]["counters"],
            "tokens": runs[0]["tokens"],
            "stable": all(r["tokens"] == runs[0]["tokens"] for r in runs),
        }
    finally:
        ex.close()
    if profile and mode in ("fused", "replay-nofuse"):
        # A separate executor: timestamps between regions slow the step (on an H200, SmolLM2-shape
        # replay-nofuse 582 -> 376 tok/s), so the timed repetitions above run without them.
        ex = make_executor(mode, device, model.program, model.weights, profile=True)
        try:
            decode_run(ex, model.prompt_ids, min(n, 8))
            out["region_us"] = region_profile(ex, model.prompt_ids, n)
        finally:
            ex.close()
    return out


def agreement(results: dict[str, dict]) -> dict:
    """Greedy tokens of every mode against the baseline (unfused when it ran, else the first mode)."""
    modes = list(results)
    base = BASELINE if BASELINE in results else modes[0]
    ref = results[base]["tokens"]
    mismatches = []
    for m in modes:
        toks = results[m]["tokens"]
        if m != base and toks != ref:
            i = next((k for k, (a, b) in enumerate(zip(ref, toks)) if a != b), min(len(ref), len(toks)))
            mismatches.append(
                {"mode": m, "first_index": i, "expected": ref[i : i + 8], "got": toks[i : i + 8]}
            )
        if not results[m].get("stable", True):
            mismatches.append({"mode": m, "first_index": -1, "unstable": "tokens differ between repetitions"})
    return {"ok": not mismatches, "baseline": base, "mismatches": mismatches}


# ---------------------------------------------------------------- every mode


def run_bench(
    device,
    model: BenchModel,
    modes,
    n: int = 32,
    reps: int = 5,
    warmup: int = 1,
    profile: bool = False,
    copy_bytes: int = 256 << 20,
    log=None,
) -> dict:
    """Everything `vkdecode bench` reports, as one JSON-able dict."""
    first_build = {}

    def measure(ex) -> None:  # the first build only: the process then holds the load and one executor
        if not first_build:
            first_build.update(memory.after_build(device, ex, model.source))

    results = {m: run_mode(device, model, m, n, reps, warmup, profile, log, on_build=measure) for m in modes}
    agree = agreement(results)
    copy = copy_bandwidth(device, copy_bytes) if copy_bytes else 0.0
    wb = weight_bytes_per_token(model.program, model.weights)
    for r in results.values():
        gbps = wb * r["tok_s"]["median"] / 1e9
        r["bandwidth"] = {"GBps": gbps, "fraction_of_copy": gbps / copy if copy else None}
        for e in r.get("region_us", {}).values():
            rule_read_rate(e, copy)
    ratio = None
    if "unfused" in results and "fused" in results and results["fused"]["host_us"]["median"] > 0:
        ratio = results["unfused"]["host_us"]["median"] / results["fused"]["host_us"]["median"]
    return {
        "environment": environment(device),
        "model": model.describe(),
        "settings": {
            "tokens": n,
            "reps": reps,
            "warmup": warmup,
            "prompt_tokens": len(model.prompt_ids),
            "ctx": model.program.meta.get("ctx"),
            "profile": profile,
        },
        "memory": first_build,
        "copy_GBps": copy,
        "weight_bytes_per_token": wb,
        "host_us_ratio_unfused_fused": ratio,
        "agreement": agree,
        "modes": results,
    }

"""Where a fused decode step's GPU time goes, per model shape: tok/s, GPU µs per token, GPU µs /
dispatches / bytes / achieved bandwidth by fusion rule, against the device's copy bandwidth, and
(with --llama-server) llama.cpp's Vulkan decode on the very same GGUF in the same run. Writes JSON;
never asserts timings.

    python -m bench.decode_breakdown --shape llama3.2-1b --quant f16 --out bd.json
    python -m bench.decode_breakdown --shape llama3.2-1b:f16 llama3.1-8b:q4_k_m --gguf-dir /tmp/g \
        --llama-server /tmp/llama/llama-server --out bd.json       # + llama.cpp on the written GGUFs
    python -m bench.decode_breakdown --model m.gguf --llama-server /tmp/llama/llama-server
    python -m bench.decode_breakdown --shape tiny --tokens 4 --reps 1 --copy-mib 4   # seconds, lavapipe

Timing is vkdecode.benchmark's: fused replay, the prompt (--prompt-tokens) then --tokens greedy steps,
one warm-up run, median over --reps (tok/s from wall time, GPU µs from the step's timestamps).
The rule breakdown comes from a second executor with a timestamp after every region (they slow
the step, so they stay out of the timed runs): median µs per region over the steps, summed by
rule. Bytes per rule: the weights its regions read (the embedding: one row) plus the KV rows its
attention ops read, averaged over the timed positions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from vkdecode import benchmark as bench
from vkdecode.cli.bench import write_json


def kv_bytes(program, op, p0: int, n: int) -> int:
    """K and V bytes one attention op reads per step, averaged over positions p0 .. p0+n-1: rows
    0..pos of its caches (a sliding window: at most `window` rows)."""
    from vkdecode.executors.plan import value_bytes

    _, k_cache, v_cache, _ = op.inputs
    window = int(op.attrs.get("window", 0))
    rows = sum(min(pos + 1, window) if window else pos + 1 for pos in range(p0, p0 + n))
    row_bytes = sum(value_bytes(program.values[c]) // program.values[c].shape[0] for c in (k_cache, v_cache))
    return round(row_bytes * rows / n)


def kv_bytes_by_rule(ex, p0: int, n: int) -> dict[str, int]:
    """kv_bytes of every attention op, summed by the rule of the region that runs it."""
    out: dict[str, int] = {}
    for r in ex.regions:
        for i in r.ops:
            op = ex.program.ops[i]
            if op.kind == "attention":
                key = r.rule or r.name
                out[key] = out.get(key, 0) + kv_bytes(ex.program, op, p0, n)
    return out


def _rate(nbytes: float, us: float, copy: float) -> dict:
    """GB/s of nbytes in us, against the copy; us_at_copy: the time the bytes alone would take at
    the copy's rate (what is left above it is latency: the dispatch chain, reductions, launch)."""
    gbps = nbytes / (us * 1e3) if us > 0 else 0.0
    return {
        "GBps": gbps,
        "fraction_of_copy": gbps / copy if copy else None,
        "us_at_copy": nbytes / (copy * 1e3) if copy else None,
    }


def breakdown(dev, model, caps, n: int, reps: int, copy: float) -> dict:
    """Everything this bench reports for one model (see the module docstring)."""
    from vkdecode.executors import make_executor

    timed = bench.timed_fused(dev, model, caps, n, reps)
    with make_executor("fused", dev, model.program, model.weights, caps=caps, profile=True) as ex:
        bench.decode_run(ex, model.prompt_ids, min(n, 8))
        rules = bench.region_profile(ex, model.prompt_ids, n)
        profiled_us = statistics.median(s.gpu_us for s in ex.token_stats[-n:])
        executed = bench.executed_per_token(ex)
        kv_by_rule = kv_bytes_by_rule(ex, len(model.prompt_ids), n)
    wb = bench.weight_bytes_per_token(model.program, model.weights)
    kv = sum(kv_by_rule.values())
    gpu_us, tok_s = timed["gpu_us"]["median"], timed["tok_s"]["median"]
    region_sum = sum(e["us"] for e in rules.values())
    for rule, e in rules.items():
        e["kv_bytes"] = kv_by_rule.get(rule, 0)
        e["share_of_step"] = e["us"] / region_sum if region_sum else 0.0
        e.update(_rate(e["weight_bytes"] + e["kv_bytes"], e["us"], copy))
    step = {
        "weight_bytes": wb,
        "kv_bytes": kv,
        "gpu_us": gpu_us,
        "wall_us": 1e6 / tok_s if tok_s else None,
        "gpu": _rate(wb + kv, gpu_us, copy),
        "wall": _rate(wb + kv, 1e6 / tok_s if tok_s else 0.0, copy),
    }
    return {
        "model": model.describe(),
        "tok_s": timed["tok_s"],
        "gpu_us": timed["gpu_us"],
        "executed_per_token": executed,
        "step": step,
        "rules": rules,
        "profiled_step_gpu_us": profiled_us,
        "rules_gpu_us_sum": region_sum,
        "tokens": timed["tokens"][:16],
    }


def format_breakdown(r: dict) -> str:
    m, s = r["model"], r["step"]
    head = (
        f"{m['name']} {m['quant']} ({m['n_layers']} layers, hidden {m['hidden_size']}): "
        f"{r['tok_s']['median']:.1f} tok/s, GPU {r['gpu_us']['median']:.1f} µs/token, "
        f"{r['executed_per_token']['dispatches']} dispatches, {(s['weight_bytes'] + s['kv_bytes']) / 1e6:.1f} MB "
        f"-> {s['gpu']['GBps']:.0f} GB/s of GPU time ({_pct(s['gpu'])} of copy; "
        f"{s['gpu']['us_at_copy'] or 0:.1f} µs at the copy's rate)"
    )
    lines = [
        head,
        f"  {'rule':36s} {'µs':>9s} {'share':>6s} {'disp':>5s} {'MB':>9s} {'GB/s':>7s} {'copy':>6s} {'µs@copy':>9s}",
    ]
    for rule, e in r["rules"].items():
        lines.append(
            f"  {rule:36s} {e['us']:9.1f} {100 * e['share_of_step']:5.1f}% {e['dispatches']:5d} "
            f"{(e['weight_bytes'] + e['kv_bytes']) / 1e6:9.2f} {e['GBps']:7.0f} {_pct(e):>6s} "
            f"{e['us_at_copy'] or 0:9.1f}"
        )
    lines.append(
        f"  (profiled step {r['profiled_step_gpu_us']:.1f} µs with region timestamps; "
        f"regions sum to {r['rules_gpu_us_sum']:.1f})"
    )
    if "peer" in r:
        lines.append(
            f"  llama.cpp Vulkan: {r['peer']['decode']['tok_s_median']:.1f} tok/s; "
            f"vkdecode / llama.cpp = {r['ratio_vs_llama_cpp']:.2f}"
        )
    return "\n".join(lines)


def _pct(rate: dict) -> str:
    f = rate.get("fraction_of_copy")
    return f"{100 * f:.0f}%" if f is not None else "-"


def model_specs(a) -> list[tuple[str, str, str]]:
    """-> [(kind "shape" | "file", shape or path, quant)] from --shape (S or S:QUANT) and --model."""
    specs = []
    for s in a.shape or []:
        shape, _, quant = s.partition(":")
        if shape not in bench.SHAPES:
            raise SystemExit(f"error: unknown shape {shape!r} (choose from {', '.join(bench.SHAPES)})")
        specs.append(("shape", shape, quant or a.quant))
    specs += [("file", p, "") for p in a.model or []]
    if not specs:
        raise SystemExit("error: give --shape and/or --model")
    if a.llama_server and not a.gguf_dir and any(k == "shape" for k, _, _ in specs):
        a.gguf_dir = tempfile.mkdtemp(prefix="vkdecode-shapes-")  # llama.cpp needs the file
    return specs


def bench_model(kind: str, what: str, quant: str, a):
    """The BenchModel of one spec; a shape goes through a written GGUF when --gguf-dir is set (the
    very file llama-server then reads)."""
    if kind == "shape" and not a.gguf_dir:
        return bench.random_model(what, quant, a.ctx, a.prompt_tokens, n_layers=a.layers), None
    path = what
    if kind == "shape":
        from bench.shape_gguf import write_shape_gguf

        layers = f"-{a.layers}l" if a.layers else ""
        path = os.path.join(a.gguf_dir, f"{what}{layers}-{quant}.gguf")
        if not os.path.exists(path):  # written once: a second run reuses the file
            os.makedirs(a.gguf_dir, exist_ok=True)
            t0 = time.perf_counter()
            write_shape_gguf(path, what, quant, n_layers=a.layers)
            print(
                f"wrote {path} ({os.path.getsize(path) / 2**30:.2f} GiB) in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
    return bench.file_model(path, a.ctx, a.prompt_tokens), path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", nargs="+", help="random-weight shapes, each S or S:QUANT")
    ap.add_argument("--quant", default="f16", help="weight dtype of a --shape given without :QUANT")
    ap.add_argument("--model", nargs="+", help="GGUF files (or HF directories)")
    ap.add_argument("--layers", type=int, default=0, help="only the first N layers of each --shape (0: all)")
    ap.add_argument("--gguf-dir", default=None, help="write each --shape as a GGUF here and load that file")
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--tokens", type=int, default=128, help="timed decode steps per repetition (tg N)")
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--copy-mib", type=int, default=256, help="size of the copy that measures bandwidth")
    ap.add_argument(
        "--llama-server", default=None, help="also llama.cpp's decode on each GGUF (path of llama-server)"
    )
    ap.add_argument("--llama-reps", type=int, default=5)
    ap.add_argument("--port", type=int, default=18093)
    ap.add_argument("--device", default=None)
    ap.add_argument("--out", default=None, help="JSON path (default: stdout only)")
    a = ap.parse_args(argv)
    if a.prompt_tokens + a.tokens > a.ctx:
        raise SystemExit(f"error: --prompt-tokens + --tokens = {a.prompt_tokens + a.tokens} > --ctx {a.ctx}")
    specs = model_specs(a)
    from vkdecode.lowering.calls import KernelCaps
    from vkdecode.vk import Device

    out = {"settings": {k: v for k, v in vars(a).items() if k != "device"}, "results": []}
    files = []
    with Device(a.device) as dev:
        caps = KernelCaps.from_info(dev.info)
        out["environment"] = bench.environment(dev)
        out["caps"] = dict(caps.__dict__)
        copies = bench.copy_bandwidths(dev, a.copy_mib << 20) if a.copy_mib else {}
        copy = max(copies.values(), default=0.0)
        out["copy_GBps"] = {**copies, "best": copy}
        for kind, what, quant in specs:
            model, path = bench_model(kind, what, quant, a)
            r = breakdown(dev, model, caps, a.tokens, a.reps, copy)
            print(format_breakdown(r), flush=True)
            out["results"].append(r)
            files.append((path, model.prompt_ids))
            del model
        dev.check_validation()
    if a.llama_server:
        from bench.llama_server_peer import decode_timings, llama_server

        for r, (path, ids) in zip(out["results"], files):
            if path is None or not path.endswith(".gguf"):
                r["peer"] = {"skipped": "not a GGUF file"}
                continue
            log = (
                a.out or os.path.join(a.gguf_dir or ".", "bd")
            ) + f".{os.path.basename(path)}.llama-server.log"
            with llama_server(a.llama_server, path, a.ctx, a.port, log) as (url, peer):
                peer["decode"] = decode_timings(url, ids, a.tokens, a.llama_reps, 2, log)
            r["peer"] = peer
            r["ratio_vs_llama_cpp"] = r["tok_s"]["median"] / peer["decode"]["tok_s_median"]
            # both per decode step (vkdecode times n steps for n tokens; see llama_server_peer)
            r["ratio_vs_llama_cpp_steps"] = r["tok_s"]["median"] / peer["decode"]["steps_s_median"]
            print(format_breakdown(r).splitlines()[-1].strip(), flush=True)
    write_json(out, a.out or "-")
    return 0


if __name__ == "__main__":
    sys.exit(main())

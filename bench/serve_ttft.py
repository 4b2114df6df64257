"""Time to first token of a second chat turn through `vkdecode serve`, with and without the prompt
cache. Starts the server as its own process (`python -m vkdecode serve --port 0`) and talks to it
over HTTP on 127.0.0.1 with streaming requests, the way a chat front-end does. Writes JSON; never
asserts timings.

Each repetition: turn 1 (system prompt + question; greedy reply of --reply-tokens), then turn 2
(turn 1, the reply as the assistant message, a second question) twice: cache_prompt true (only the
tokens after the cached prefix run) and cache_prompt false (the whole prompt runs). TTFT is measured
by the client: request sent -> first SSE event with generated text; the server's own figure
(timings.ttft_s: job start -> first token) is recorded beside it.

    python -m bench.serve_ttft                                  # the default model (SmolLM2 Q4_1 GGUF)
    python -m bench.serve_ttft --shape smollm2-135m --quant q4_1 --out $OUT   # random weights, same shape
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from anywhere

SYSTEM = (
    "You are a helpful assistant for a small bakery. You answer questions about opening hours, "
    "bread, pastries and cakes, allergies and orders, politely and in a few sentences. "
)
QUESTIONS = ("Which breads do you bake on Saturdays?", "Do any of them contain nuts?")


def start_server(model: str, ctx: int, mode: str, device: str | None, log):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [
        sys.executable,
        "-m",
        "vkdecode",
        "serve",
        "--model",
        model,
        "--ctx",
        str(ctx),
        "--mode",
        mode,
        "--port",
        "0",
        "--model-id",
        "bench",
    ] + (["--device", device] if device else [])
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    lines = []
    while True:
        line = proc.stderr.readline()
        if not line:
            raise RuntimeError(f"vkdecode serve exited ({proc.wait()}):\n" + "".join(lines))
        lines.append(line)
        log(line.rstrip())
        m = re.search(r"OpenAI API at (http://\S+)/v1", line)
        if m:
            threading.Thread(target=lambda: [log(x.rstrip()) for x in proc.stderr], daemon=True).start()
            return proc, m.group(1)


def chat_turn(http, url: str, messages: list[dict], max_tokens: int, cache: bool) -> dict:
    body = {
        "model": "bench",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "cache_prompt": cache,
    }
    t0 = time.perf_counter()
    ttft, parts, final, usage = None, [], None, None
    with http.stream("POST", url + "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read().decode()}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(ev["error"]["message"])
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices", []):
                text = ch["delta"].get("content")
                if (text or ch["finish_reason"]) and ttft is None:
                    ttft = time.perf_counter() - t0
                parts.append(text or "")
                if ch["finish_reason"]:
                    final = ev
    return {
        "ttft_s": ttft,
        "text": "".join(parts),
        "usage": usage,
        "server": final.get("timings", {}),
        "total_s": time.perf_counter() - t0,
    }


def summarize(xs: list[float]) -> dict:
    return {
        "median": statistics.median(xs),
        "min": min(xs),
        "max": max(xs),
        "sd": statistics.stdev(xs) if len(xs) > 1 else 0.0,
        "n": len(xs),
        "values": xs,
    }


def run(url: str, reps: int, reply_tokens: int, system_repeat: int, log) -> dict:
    import httpx

    turn1 = [{"role": "system", "content": SYSTEM * system_repeat}, {"role": "user", "content": QUESTIONS[0]}]
    rows = {"cache": [], "no_cache": []}
    with httpx.Client(timeout=3600) as http:
        warm = chat_turn(http, url, turn1, reply_tokens, cache=False)  # pipelines, first-use costs
        log(f"warm-up turn 1: {warm['usage']['prompt_tokens']} prompt tokens, TTFT {warm['ttft_s']:.3f} s")
        for rep in range(reps):
            order = ("cache", "no_cache") if rep % 2 == 0 else ("no_cache", "cache")
            for which in order:
                first = chat_turn(http, url, turn1, reply_tokens, cache=True)
                turn2 = turn1 + [
                    {"role": "assistant", "content": first["text"]},
                    {"role": "user", "content": QUESTIONS[1]},
                ]
                r = chat_turn(http, url, turn2, 1, cache=(which == "cache"))
                rows[which].append(r)
                log(
                    f"rep {rep} {which:8s}: turn 2 {r['usage']['prompt_tokens']} prompt tokens, "
                    f"{r['usage']['prompt_tokens_details']['cached_tokens']} cached, TTFT {r['ttft_s']:.3f} s"
                )
        metrics = http.get(url + "/metrics").json()
    out = {}
    for which, rs in rows.items():
        out[which] = {
            "ttft_s": summarize([r["ttft_s"] for r in rs]),
            "server_ttft_s": summarize([r["server"]["ttft_s"] for r in rs]),
            "prompt_tokens": rs[0]["usage"]["prompt_tokens"],
            "cached_tokens": [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in rs],
            "prompt_tokens_run": [r["server"]["prompt_tokens_run"] for r in rs],
        }
    out["ttft_ratio_no_cache_over_cache"] = (
        out["no_cache"]["ttft_s"]["median"] / out["cache"]["ttft_s"]["median"]
    )
    out["turn1_prompt_tokens"] = warm["usage"]["prompt_tokens"]
    out["metrics"] = {
        k: metrics[k] for k in ("device", "mode", "ctx", "requests", "tokens", "step", "validation_errors")
    }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="GGUF file or HF dir (default: the default model)")
    ap.add_argument(
        "--shape", default=None, help="random weights of this shape instead (bench/shape_gguf.py)"
    )
    ap.add_argument("--quant", default="q4_1")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--mode", default="fused")
    ap.add_argument("--device", default=None)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reply-tokens", type=int, default=32, help="greedy tokens of the turn-1 reply")
    ap.add_argument(
        "--system-repeat", type=int, default=2, help="copies of the system paragraph in the prompt"
    )
    ap.add_argument(
        "--out",
        default=None,
        help="results root: the JSON goes to OUT/<device-slug>/serve-ttft-<model>.json (default: "
        "bench/results/<device-slug>/<date>-serve-ttft/, which then needs its README.md)",
    )
    a = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    from bench.results_index import result_dir
    from bench.run_all import device_slug
    from vkdecode import benchmark as bench

    with tempfile.TemporaryDirectory() as tmp:
        if a.shape:
            from bench.shape_gguf import write_shape_gguf

            path = write_shape_gguf(os.path.join(tmp, f"{a.shape}-{a.quant}.gguf"), a.shape, a.quant)
            name = f"{a.shape}-{a.quant}-random"
        else:
            from vkdecode.default_model import resolve_model

            path = resolve_model(a.model)
            name = re.sub(r"[^a-z0-9]+", "-", os.path.basename(path).lower()).strip("-")
        proc, url = start_server(path, a.ctx, a.mode, a.device, log)
        try:
            res = run(url, a.reps, a.reply_tokens, a.system_repeat, log)
        finally:
            proc.terminate()
            proc.wait(60)
    res = {
        "bench": "serve_ttft",
        "name": name,
        "transport": "HTTP (vkdecode serve subprocess, httpx streaming)",
        "model": {"path": os.path.basename(path), "shape": a.shape, "quant": a.quant if a.shape else None},
        "settings": {
            "ctx": a.ctx,
            "mode": a.mode,
            "reps": a.reps,
            "reply_tokens": a.reply_tokens,
            "system_repeat": a.system_repeat,
        },
        "environment": {
            "device": res["metrics"]["device"],
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
            "git_commit": bench.git_commit(),
            "python": sys.version.split()[0],
        },
        **res,
    }
    slug = device_slug(res["environment"]["device"])
    out_dir = os.path.join(a.out, slug) if a.out else str(result_dir(slug, "serve-ttft"))
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, f"serve-ttft-{name}.json")
    with open(out, "w") as f:
        json.dump(res, f, indent=2)
    c, n = res["cache"], res["no_cache"]
    print(
        f"{name} on {res['environment']['device']}: turn 2 of {c['prompt_tokens']} prompt tokens, TTFT "
        f"{c['ttft_s']['median'] * 1e3:.1f} ms with the prompt cache ({c['cached_tokens'][0]} cached) vs "
        f"{n['ttft_s']['median'] * 1e3:.1f} ms without ({res['ttft_ratio_no_cache_over_cache']:.1f}x) -> {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

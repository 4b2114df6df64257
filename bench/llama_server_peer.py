"""The peer: llama.cpp's Vulkan `llama-server` on the same GGUF file: prompt throughput and time to
first token per prompt length (for side-by-side runs with bench/prefill.py), and decode tok/s (for
bench/decode_breakdown.py, which calls decode_timings in the same run). Writes one JSON; never
asserts timings.

    python -m bench.llama_server_peer --server /path/llama-server --model m.gguf --lengths 128 512 2000 \
        --out peer.json
    python -m bench.llama_server_peer --server /path/llama-server --model m.gguf --lengths --decode 128 \
        --out peer.json                                          # decode only

Prompt: each request is a `/completion` of random token ids (seeded; the prompt length is exact
whatever the tokenizer) with n_predict 1 and cache_prompt false, so every repetition processes the
whole prompt. prompt tok/s is the server's own `timings.prompt_per_second`; TTFT is the request's
wall time (prompt + one token, HTTP on loopback included).
Decode (`--decode N`): a short prompt, then N greedy tokens with ignore_eos (llama-bench's tg N);
tok/s is the server's `timings.predicted_per_second` (its decode steps only: no prompt, no HTTP),
median over the repetitions; a reply that predicted other than N tokens is refused. The server's
clock starts after the first token, which comes from the prompt's logits, so that is N tokens over
N - 1 steps; `steps_s_median` is the rate of the steps themselves.
The server log must show every layer offloaded to the Vulkan device, or the run is refused (a CPU
fallback would look plausible).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from vkdecode.cli.bench import write_json


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _post(url: str, body: dict, timeout: float = 300.0) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _wait_ready(url: str, proc, log_path: str, timeout: float = 180.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}:\n" + _read(log_path)[-3000:])
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if json.loads(r.read()).get("status") == "ok":
                    return
        except Exception:  # noqa: BLE001 - not up yet (connection refused, 503 while loading)
            time.sleep(0.5)
    raise RuntimeError("llama-server did not become ready in time")


def offload_check(log: str) -> str:
    """The log's 'offloaded N/M layers to GPU' line; refuses a run where N < M or where no Vulkan
    device was used (on lavapipe ggml falls back to its CPU backend and still says 'GPU')."""
    if "Vulkan" not in log:
        raise RuntimeError("llama-server's log names no Vulkan device: the run did not use ggml-vulkan")
    m = re.search(r"offloaded (\d+)/(\d+) layers to GPU", log)
    if not m or m.group(1) != m.group(2):
        raise RuntimeError(
            f"not every layer is on the GPU: {m.group(0) if m else 'no offload line in the log'}"
        )
    return m.group(0)


@contextmanager
def llama_server(
    server: str, model: str, ctx: int, port: int, log_path: str, slots: int = 1, extra: tuple = ()
):
    """Starts llama-server on `model` with every layer offloaded, waits until it is ready and
    checks its log (offload_check); yields (url, facts about the run for the JSON); stops it.
    slots: -np (parallel sequences; llama.cpp splits ctx among them)."""
    cmd = [
        server,
        "-m",
        model,
        "-ngl",
        "999",
        "-c",
        str(ctx),
        "-b",
        "2048",
        "-ub",
        "512",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "-np",
        str(slots),
        "-lv",
        "4",
        *extra,
    ]
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(url, proc, log_path)
        text = _read(log_path)
        yield (
            url,
            {
                "peer": "llama.cpp llama-server (Vulkan)",
                "model": os.path.basename(model),
                "cmd": " ".join(cmd),
                "offload": offload_check(text),
                "device_lines": [ln for ln in text.splitlines() if "Vulkan" in ln][:6],
                "build": next((ln for ln in text.splitlines() if "build" in ln.lower()), ""),
            },
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def prompt_timings(url: str, lengths, reps: int, warmup: int, vocab: int) -> dict:
    """Per prompt length: median request wall time (TTFT), the server's prompt ms and tok/s."""
    out = {}
    rng = np.random.default_rng(0)
    for n in lengths:
        ids = [int(t) for t in rng.integers(100, vocab, n)]
        walls, pps, pms = [], [], []
        for r in range(warmup + reps):
            t0 = time.perf_counter()
            rep = _post(
                url + "/completion", {"prompt": ids, "n_predict": 1, "cache_prompt": False, "temperature": 0}
            )
            dt = time.perf_counter() - t0
            t = rep["timings"]
            if t.get("prompt_n") != n:
                raise RuntimeError(f"the server processed {t.get('prompt_n')} prompt tokens, not {n}")
            if r >= warmup:
                walls.append(dt)
                pps.append(t["prompt_per_second"])
                pms.append(t["prompt_ms"])
        out[str(n)] = {
            "ttft_s_median": statistics.median(walls),
            "prompt_ms_median": statistics.median(pms),
            "prompt_tok_s_median": statistics.median(pps),
            "reps": reps,
        }
        print(
            f"llama.cpp {n:5d} tokens: prompt {statistics.median(pms):8.1f} ms "
            f"({statistics.median(pps):8.0f} tok/s), request {statistics.median(walls) * 1e3:8.1f} ms",
            flush=True,
        )
    return out


def decode_figures(reply: dict, n_predict: int) -> tuple[float, float]:
    """(decode tok/s, decode ms) of one /completion reply; refuses one that stopped early."""
    t = reply.get("timings") or {}
    if t.get("predicted_n") != n_predict:
        raise RuntimeError(
            f"the server predicted {t.get('predicted_n')} tokens, not {n_predict} "
            "(ignore_eos not honoured, or the context is full)"
        )
    tok_s, ms = t.get("predicted_per_second"), t.get("predicted_ms")
    if not (isinstance(tok_s, (int, float)) and tok_s > 0 and isinstance(ms, (int, float)) and ms > 0):
        raise RuntimeError(f"the reply has no usable decode timings: {t}")
    return float(tok_s), float(ms)


def logged_decode(log_text: str, n_predict: int) -> tuple[float, float]:
    """(decode tok/s, decode ms) from the server log's last `eval time = X ms / N tokens` line (not
    the `prompt eval time` one); refuses a line of another token count."""
    hits = re.findall(r"\|\s+eval time =\s+([\d.]+) ms /\s+(\d+) tokens", log_text)
    if not hits or int(hits[-1][1]) != n_predict:
        raise RuntimeError(f"no decode timing of {n_predict} tokens in the llama-server log")
    ms = float(hits[-1][0])
    return n_predict / (ms / 1e3), ms


def decode_timings(
    url: str, prompt_ids: list[int], n_predict: int, reps: int, warmup: int, log_path: str | None = None
) -> dict:
    """tg n_predict after the prompt `prompt_ids`, greedy, EOS ignored: the server's decode tok/s
    (median, min, max and every repetition). A random-weight model's output is not valid text, and
    recent servers answer it with HTTP 500 ("does not match the expected Content-only format")
    after timing it: then the timing comes from the server's log line (log_path), which reads
    predicted_ms the same way (its clock also starts after the first token)."""
    body = {
        "prompt": [int(t) for t in prompt_ids],
        "n_predict": n_predict,
        "ignore_eos": True,
        "cache_prompt": False,
        "temperature": 0,
    }
    speeds, ms = [], []
    for r in range(warmup + reps):
        try:
            tok_s, dt = decode_figures(_post(url + "/completion", body), n_predict)
        except urllib.error.HTTPError:
            if log_path is None:
                raise
            time.sleep(0.2)  # the log line is written before the reply; let it flush
            tok_s, dt = logged_decode(_read(log_path), n_predict)
        if r >= warmup:
            speeds.append(tok_s)
            ms.append(dt)
    # the server's first predicted token comes from the prompt's logits (its clock starts after
    # it), so predicted_ms spans n_predict - 1 decode steps: steps_s is that rate
    out = {
        "n_predict": n_predict,
        "prompt_tokens": len(prompt_ids),
        "reps": reps,
        "tok_s_median": statistics.median(speeds),
        "tok_s_min": min(speeds),
        "tok_s_max": max(speeds),
        "tok_s": speeds,
        "predicted_ms_median": statistics.median(ms),
        "steps_s_median": statistics.median(1e3 * (n_predict - 1) / t for t in ms),
    }
    print(
        f"llama.cpp decode tg{n_predict} after {len(prompt_ids)} prompt tokens: "
        f"{out['tok_s_median']:8.1f} tok/s (median of {reps})",
        flush=True,
    )
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="path of llama-server")
    ap.add_argument("--model", required=True)
    ap.add_argument(
        "--lengths", type=int, nargs="*", default=[128, 512, 2000], help="prompt lengths (none: skip)"
    )
    ap.add_argument("--decode", type=int, default=0, help="also decode tok/s over this many tokens (tg N)")
    ap.add_argument("--decode-prompt", type=int, default=16, help="prompt tokens before the decoded ones")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--port", type=int, default=18093)
    ap.add_argument("--vocab", type=int, default=32000, help="token ids are drawn below this")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    with llama_server(a.server, a.model, a.ctx, a.port, (a.out or "llama-server") + ".log") as (url, result):
        result["lengths"] = prompt_timings(url, a.lengths, a.reps, a.warmup, a.vocab)
        if a.decode:
            ids = np.random.default_rng(1).integers(100, a.vocab, a.decode_prompt).tolist()
            result["decode"] = decode_timings(
                url, ids, a.decode, a.reps, a.warmup, (a.out or "llama-server") + ".log"
            )
    if a.out:
        write_json(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The peer: llama.cpp's Vulkan `llama-server` on the same GGUF file, prompt throughput and time to
first token per prompt length, for side-by-side runs with bench/prefill.py. Writes one JSON; never
asserts timings.

    python -m bench.llama_server_peer --server /path/llama-server --model m.gguf --lengths 128 512 2000 \
        --out peer.json

Each request is a `/completion` of random token ids (seeded; the prompt length is exact whatever
the tokenizer) with n_predict 1 and cache_prompt false, so every repetition processes the whole
prompt. prompt tok/s is the server's own `timings.prompt_per_second`; TTFT is the request's wall
time (prompt + one token, HTTP on loopback included). The server log must show every layer
offloaded to the Vulkan device, or the run is refused (a CPU fallback would look plausible).
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
import urllib.request

import numpy as np

from vkdecode.cli_bench import write_json


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
        raise RuntimeError(f"not every layer is on the GPU: {m.group(0) if m else 'no offload line in the log'}")
    return m.group(0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="path of llama-server")
    ap.add_argument("--model", required=True)
    ap.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2000])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--port", type=int, default=18093)
    ap.add_argument("--vocab", type=int, default=32000, help="token ids are drawn below this")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    log_path = (a.out or "llama-server") + ".log"
    cmd = [a.server, "-m", a.model, "-ngl", "999", "-c", str(a.ctx), "-b", "2048", "-ub", "512",
           "--port", str(a.port), "--host", "127.0.0.1", "-np", "1", "-lv", "4"]
    url = f"http://127.0.0.1:{a.port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(url, proc, log_path)
        text = _read(log_path)
        result = {"peer": "llama.cpp llama-server (Vulkan)", "model": os.path.basename(a.model),
                  "cmd": " ".join(cmd), "offload": offload_check(text),
                  "device_lines": [ln for ln in text.splitlines() if "Vulkan" in ln][:6],
                  "build": next((ln for ln in text.splitlines() if "build" in ln.lower()), ""), "lengths": {}}
        rng = np.random.default_rng(0)
        for n in a.lengths:
            ids = [int(t) for t in rng.integers(100, a.vocab, n)]
            walls, pps, pms = [], [], []
            for r in range(a.warmup + a.reps):
                t0 = time.perf_counter()
                rep = _post(url + "/completion", {"prompt": ids, "n_predict": 1, "cache_prompt": False,
                                                  "temperature": 0})
                dt = time.perf_counter() - t0
                t = rep["timings"]
                if t.get("prompt_n") != n:
                    raise RuntimeError(f"the server processed {t.get('prompt_n')} prompt tokens, not {n}")
                if r >= a.warmup:
                    walls.append(dt)
                    pps.append(t["prompt_per_second"])
                    pms.append(t["prompt_ms"])
            result["lengths"][str(n)] = {"ttft_s_median": statistics.median(walls),
                                         "prompt_ms_median": statistics.median(pms),
                                         "prompt_tok_s_median": statistics.median(pps), "reps": a.reps}
            print(f"llama.cpp {n:5d} tokens: prompt {statistics.median(pms):8.1f} ms "
                  f"({statistics.median(pps):8.0f} tok/s), request {statistics.median(walls) * 1e3:8.1f} ms",
                  flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    if a.out:
        write_json(result, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Load on an OpenAI-compatible server (`vkdecode serve --parallel N` or llama.cpp's llama-server):
N concurrent clients through the official `openai` package, each one streamed chat completion of a
fixed max_tokens at temperature 0, arrivals --gap seconds apart; one concurrency after another.
Per concurrency: aggregate generated tok/s, p50/p99 time to first token and between tokens, errors
by HTTP status. Writes JSON (one line per concurrency on stdout, the whole run to --out); never
asserts timings.

    python -m bench.serve_load --url http://127.0.0.1:8080 --clients 1 4 16 64
    python -m bench.serve_load --serve MODEL.gguf --parallel 4 --clients 1 4 --max-tokens 64 --out o.json
    python -m bench.serve_load --serve MODEL.gguf --parallel 4 --soak-minutes 30 --out soak.json

--soak-minutes M repeats waves of the mix tests/reliability/test_serve_batch_stress.py sends (clients
that disconnect mid-stream, malformed requests, stream and non-stream greedy requests; 429s retried)
for M minutes and records the server's RSS (with --serve or --server-pid) and the errors of each wave.

Tokens are counted from the stream's content chunks (one per token on both servers) and, where the
server sends `usage` (stream_options.include_usage), from that; tok/s uses usage when present.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import threading
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run from anywhere

PROMPT = (
    "You are a helpful assistant for a small bakery. Write a friendly, detailed description of the "
    "breads, pastries and cakes on sale this week, with their ingredients. Customer {i} asks."
)


# -- the server ------------------------------------------------------------------------------------
def rss_mib(pid: int | None) -> float | None:
    """Resident set size of a process from /proc (no psutil); None without a pid or once it is gone."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return None


def _child_pid(fragment: str) -> int | None:
    """A child process of this one whose command line holds `fragment`: serve_subprocess keeps its
    Popen to itself, and the server's RSS is read by pid."""
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            for pid in f.read().split():
                with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as c:
                    if fragment.encode() in c.read().replace(b"\0", b" "):
                        return int(pid)
    return None


def wait_health(url: str, timeout: float = 60) -> None:
    """The server may print its URL before uvicorn accepts connections: wait for GET /health."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}/health did not answer 200 within {timeout} s")
        time.sleep(0.1)


@contextlib.contextmanager
def vkdecode_server(model: str, parallel: int, *extra):
    """`vkdecode serve MODEL --parallel N EXTRA...` on a free port -> (base URL, server pid); stopped
    at the end (tests/helpers/serving.py starts and stops it)."""
    from tests.helpers.serving import serve_subprocess

    with serve_subprocess("--model", model, "--parallel", parallel, *extra) as url:
        wait_health(url)
        yield url, _child_pid(f"serve --port 0 --model {model}")


def first_model_id(url: str, api_key: str) -> str:
    """The model name to send: the first one /v1/models lists (both servers list the one they serve)."""
    import httpx

    r = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {api_key}"}, timeout=30)
    r.raise_for_status()
    return r.json()["data"][0]["id"]


# -- one client ------------------------------------------------------------------------------------
def openai_client(url: str, api_key: str):
    import openai

    # no retries: a 429 (queue full) is a result here (the mixed wave retries it itself, counting)
    return openai.OpenAI(base_url=url + "/v1", api_key=api_key, max_retries=0, timeout=3600)


def chat(client, model_id: str, content: str, max_tokens: int, stream: bool = True, read_chunks=None) -> dict:
    """One chat completion at temperature 0 -> {status, text, tokens, ttft_s, gaps_s, id, usage, ...}.
    read_chunks=k: read k stream chunks, then close the connection (a client that goes away)."""
    import openai

    t0 = time.perf_counter()
    rec = {"status": 200, "text": "", "tokens": 0, "ttft_s": None, "gaps_s": [], "ids": set(), "usage": None}
    kw = {"model": model_id, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    try:
        if not stream:
            r = client.chat.completions.create(temperature=0, **kw)
            rec.update(text=r.choices[0].message.content, usage=r.usage.model_dump(), ids={r.id})
            rec.update(tokens=r.usage.completion_tokens, finish=r.choices[0].finish_reason)
        else:
            s = client.chat.completions.create(
                temperature=0, stream=True, stream_options={"include_usage": True}, **kw
            )
            parts, last = [], None
            with contextlib.closing(s):
                for n, ch in enumerate(s):
                    if read_chunks is not None and n >= read_chunks:
                        rec["disconnected_after_chunks"] = n
                        break
                    rec["ids"].add(ch.id)
                    if ch.usage:
                        rec["usage"] = ch.usage.model_dump()
                    for c in ch.choices:
                        # llama-server streams a template's thinking part as reasoning_content
                        piece = c.delta.content or getattr(c.delta, "reasoning_content", None)
                        if piece:
                            now = time.perf_counter()
                            if last is None:
                                rec["ttft_s"] = now - t0
                            else:
                                rec["gaps_s"].append(now - last)
                            last = now
                            parts.append(piece)
                            rec["tokens"] += 1
                        rec["finish"] = c.finish_reason or rec.get("finish")
            rec["text"] = "".join(parts)
            if rec["usage"]:
                rec["tokens"] = rec["usage"]["completion_tokens"]
    except openai.APIStatusError as e:
        rec.update(status=e.status_code, error=_error_body(e.response))
    except openai.APIConnectionError as e:
        rec.update(status="connection", error=repr(e))
    except openai.APIError as e:  # an error event inside the stream (llama-server's output parser)
        rec.update(status="stream_error", error=repr(e))
    rec["total_s"] = time.perf_counter() - t0
    return rec


def _error_body(response):
    try:
        return response.json()
    except ValueError:
        return response.text


# -- plain load: N streaming clients ---------------------------------------------------------------
def pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def batch_counters(url: str, api_key: str) -> dict | None:
    """vkdecode serve's batch counters from /metrics (steps per width, solo steps, the width each
    count of sequences runs at), or None (llama-server, or no batched engine)."""
    import httpx

    try:
        m = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {api_key}"}, timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(m, dict) or "batch_steps" not in m:
        return None
    return {
        k: m[k]
        for k in ("batch_steps", "solo_steps", "batch_width_for", "batch_width_ms", "engine_s")
        if k in m
    }


def steps_during(before: dict | None, after: dict | None) -> dict | None:
    """The batched steps per width, the solo steps and the engine thread's seconds a level took
    (after - before), and the widths."""
    if before is None or after is None:
        return None
    per_width = {w: n - before["batch_steps"].get(w, 0) for w, n in after["batch_steps"].items()}
    secs = {
        k: round(v - before.get("engine_s", {}).get(k, 0.0), 4) for k, v in after.get("engine_s", {}).items()
    }
    return {
        "batch_steps": {w: n for w, n in per_width.items() if n},
        "solo_steps": after.get("solo_steps", 0) - before.get("solo_steps", 0),
        "batch_width_for": after.get("batch_width_for"),
        "batch_width_ms": after.get("batch_width_ms"),
        "engine_s": secs,  # the engine thread's seconds in batched steps, prompt pieces, token hand-off
    }


def load_level(url, model_id, api_key, clients: int, max_tokens: int, gap: float, pid) -> dict:
    """`clients` concurrent streamed chats, started `gap` s apart; -> the figures of this concurrency
    (with vkdecode serve: the batched steps per width that ran them)."""
    recs: list[dict] = [None] * clients
    rss0 = rss_mib(pid)
    counters0 = batch_counters(url, api_key)

    def one(i):
        recs[i] = chat(openai_client(url, api_key), model_id, PROMPT.format(i=i), max_tokens)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
        time.sleep(gap)
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in recs if r["status"] == 200]
    errors: dict[str, int] = {}
    for r in recs:
        if r["status"] != 200:
            errors[str(r["status"])] = errors.get(str(r["status"]), 0) + 1
    tokens = sum(r["tokens"] for r in ok)
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    gaps = [g for r in ok for g in r["gaps_s"]]
    return {
        "clients": clients,
        "max_tokens": max_tokens,
        "gap_s": gap,
        "ok": len(ok),
        "errors_by_status": errors,
        "generated_tokens": tokens,
        "tokens_from": "usage" if ok and all(r["usage"] for r in ok) else "chunks",
        "wall_s": round(wall, 3),
        "aggregate_tok_s": tokens / wall,
        "ttft_s": {"p50": pct(ttft, 50), "p99": pct(ttft, 99)},
        "tbt_s": {"p50": pct(gaps, 50), "p99": pct(gaps, 99)},
        "finish_reasons": sorted({str(r.get("finish")) for r in ok}),
        "server_rss_mib": {"start": rss0, "end": rss_mib(pid)},
        "server_steps": steps_during(counters0, batch_counters(url, api_key)),
    }


# -- the mixed wave (the stress test's mix; the soak repeats it) -----------------------------------
MALFORMED = ("bad_json", "wrong_type_max_tokens", "wrong_type_messages", "too_long", "unknown_model")


def malformed(url: str, kind: str, model_id: str, api_key: str, long_words: int) -> dict:
    """A request the server must refuse with a 4xx and a JSON error body (sent raw: the openai
    package would refuse to build most of these)."""
    import httpx

    msg = [{"role": "user", "content": "hello"}]
    body = {
        "bad_json": b'{"model": "x", "messages": [',
        "wrong_type_max_tokens": {"model": model_id, "messages": msg, "max_tokens": "ten"},
        "wrong_type_messages": {"model": model_id, "messages": 5},
        "too_long": {"model": model_id, "messages": [{"role": "user", "content": "bread " * long_words}]},
        "unknown_model": {"model": model_id + "-nope", "messages": msg},
    }[kind]
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(
        url + "/v1/chat/completions",
        content=raw,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
        timeout=120,
    )
    return {"status": r.status_code, "error": _error_body(r)}


def mixed_wave(
    url,
    model_id,
    api_key,
    clients: int = 64,
    seed: int = 0,
    prompts: int = 12,
    disconnect_share: float = 0.25,
    malformed_share: float = 0.2,
    disconnect_max_tokens: int = 400,
    long_words: int = 4000,
    spread_s: float = 0.5,
    retry_sleep_s: float = 0.05,
) -> list[dict]:
    """`clients` threads at once (seeded arrivals within spread_s): some read a few stream chunks and
    close (disconnect_max_tokens long, so they leave mid-generation), some send a malformed request,
    the rest a greedy request (stream or not) for one of `prompts` prompts, prompt i always with
    max_tokens 4 + i % 9. A 429 (queue full) is retried after retry_sleep_s until answered.
    -> one record per client: kind, prompt index, retries_429, and chat()'s or malformed()'s result."""
    rng = random.Random(seed)
    n_disc, n_bad = round(clients * disconnect_share), round(clients * malformed_share)
    plan = ["disconnect"] * n_disc + ["malformed"] * n_bad + ["ok"] * (clients - n_disc - n_bad)
    rng.shuffle(plan)
    jobs = []
    for i, kind in enumerate(plan):
        job = {"client": i, "kind": kind, "delay_s": rng.uniform(0, spread_s)}
        if kind == "ok":
            p = rng.randrange(prompts)
            job.update(prompt=p, stream=rng.random() < 0.5)
        elif kind == "disconnect":
            job.update(read_chunks=rng.randrange(0, 8))  # 0: gone right after the response headers
        else:
            job.update(malformed=MALFORMED[i % len(MALFORMED)])
        jobs.append(job)
    recs: list[dict] = [None] * clients
    start = threading.Barrier(clients)

    def one(job):
        client = openai_client(url, api_key)
        start.wait()
        time.sleep(job["delay_s"])
        retries = 0
        while True:
            if job["kind"] == "malformed":
                r = malformed(url, job["malformed"], model_id, api_key, long_words)
            elif job["kind"] == "disconnect":
                r = chat(
                    client,
                    model_id,
                    mixed_prompt(-1 - job["client"]),
                    disconnect_max_tokens,
                    True,
                    job["read_chunks"],
                )
            else:
                p = job["prompt"]
                r = chat(client, model_id, mixed_prompt(p), mixed_max_tokens(p), job["stream"])
            if r["status"] != 429:
                break
            retries += 1
            time.sleep(retry_sleep_s)
        recs[job["client"]] = dict(job, retries_429=retries, **r)

    threads = [threading.Thread(target=one, args=(j,)) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return recs


def mixed_prompt(i: int) -> str:
    return PROMPT.format(i=i)


def mixed_max_tokens(i: int) -> int:
    return 4 + i % 9


def wave_summary(recs: list[dict]) -> dict:
    by_status: dict[str, int] = {}
    for r in recs:
        by_status[str(r["status"])] = by_status.get(str(r["status"]), 0) + 1
    return {
        "clients": len(recs),
        "status": by_status,
        "retried_429": sum(r["retries_429"] for r in recs),
        "disconnected": sum(1 for r in recs if "disconnected_after_chunks" in r),
        "generated_tokens": sum(r["tokens"] for r in recs if r["kind"] == "ok" and r["status"] == 200),
    }


def soak(url, model_id, api_key, minutes: float, clients: int, pid, log, long_words: int = 4000) -> dict:
    """Mixed waves for `minutes`: the server's RSS after each, and what each wave got."""
    waves, t0, seed = [], time.monotonic(), 0
    while time.monotonic() - t0 < minutes * 60:
        w = wave_summary(mixed_wave(url, model_id, api_key, clients, seed=seed, long_words=long_words))
        w.update(t_s=round(time.monotonic() - t0, 1), server_rss_mib=rss_mib(pid))
        # 4xx are the malformed requests, 200 the rest: anything else is an error of the server
        w["errors"] = {s: n for s, n in w["status"].items() if s != "200" and not s.startswith("4")}
        waves.append(w)
        log(json.dumps(w))
        seed += 1
    rss = [w["server_rss_mib"] for w in waves if w["server_rss_mib"] is not None]
    return {
        "minutes": minutes,
        "waves": waves,
        "errors_total": sum(sum(w["errors"].values()) for w in waves),
        "server_rss_mib": {"first_wave": rss[0], "last_wave": rss[-1], "max": max(rss)} if rss else None,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a running server's base URL (http://host:port, without /v1)")
    where.add_argument("--serve", metavar="MODEL", help="start `vkdecode serve MODEL` on a free port")
    where.add_argument(
        "--llama-model", metavar="MODEL", help="start llama.cpp's --llama-server on MODEL (-np --parallel)"
    )
    ap.add_argument("--llama-server", default="/tmp/llama/llama-server", help="with --llama-model")
    ap.add_argument("--parallel", type=int, default=4, help="with --serve: serve --parallel N")
    ap.add_argument("--max-queue", type=int, default=64, help="with --serve: serve --max-queue")
    ap.add_argument("--ctx", type=int, default=None, help="with --serve: serve --ctx (llama: per slot)")
    ap.add_argument("--mode", default=None, help="with --serve: serve --mode")
    ap.add_argument("--server-pid", type=int, default=None, help="with --url: record this process's RSS")
    ap.add_argument("--model-id", default=None, help="model name to send (default: /v1/models' first)")
    ap.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", "none"))
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 64])
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--gap", type=float, default=0.05, help="seconds between two clients' arrivals")
    ap.add_argument("--soak-minutes", type=float, default=0, help="mixed waves for M minutes instead")
    ap.add_argument(
        "--long-words", type=int, default=4000, help="soak: words of the over-long prompts (refused, 400)"
    )
    ap.add_argument("--out", default=None, help="write the whole run's JSON here")
    a = ap.parse_args(argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)

    with contextlib.ExitStack() as stack:
        if a.serve:
            extra = [x for k, v in (("--ctx", a.ctx), ("--mode", a.mode)) if v is not None for x in (k, v)]
            url, pid = stack.enter_context(
                vkdecode_server(a.serve, a.parallel, "--max-queue", a.max_queue, *extra)
            )
        elif a.llama_model:
            from bench.llama_server_peer import llama_server

            log_path = (a.out or "serve_load") + ".llama.log"
            total = (a.ctx or 4096) * a.parallel  # llama.cpp splits -c among its -np slots
            url, facts = stack.enter_context(
                # chatml: the shape files' random output broke llama-server's parser for the GGUF's
                # own (tool-calling) template mid-stream ("does not match the expected format")
                llama_server(
                    a.llama_server,
                    a.llama_model,
                    total,
                    18094,
                    log_path,
                    a.parallel,
                    ("--chat-template", "chatml"),
                )
            )
            pid = None
        else:
            url, pid = a.url.rstrip("/"), a.server_pid
        model_id = a.model_id or first_model_id(url, a.api_key)
        warm = chat(openai_client(url, a.api_key), model_id, PROMPT.format(i="warm-up"), 8)
        if warm["status"] != 200:
            raise SystemExit(f"the warm-up request failed: {warm['status']} {warm.get('error')}")
        res = {
            "bench": "serve_load",
            "url": url,
            "server": {
                "vkdecode serve": a.serve,
                "parallel": a.parallel,
                "max_queue": a.max_queue,
                "ctx": a.ctx,
            }
            if a.serve
            else dict(facts, parallel=a.parallel, ctx_per_slot=a.ctx or 4096)
            if a.llama_model
            else {"external": url, "pid": pid},
            "model_id": model_id,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        }
        if a.soak_minutes:
            res["soak"] = soak(
                url, model_id, a.api_key, a.soak_minutes, max(a.clients), pid, log, a.long_words
            )
            print(json.dumps({k: v for k, v in res["soak"].items() if k != "waves"}))
        else:
            res["levels"] = []
            for n in a.clients:
                row = load_level(url, model_id, a.api_key, n, a.max_tokens, a.gap, pid)
                res["levels"].append(row)
                print(json.dumps(row), flush=True)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

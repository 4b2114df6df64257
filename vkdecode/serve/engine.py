"""`vkdecode serve`: one model on one device, requests run one at a time in arrival order.

The model is used from one worker thread only (README "Threads": a Device is single-threaded).
Requests wait in a FIFO of bounded length; a full queue refuses at once (429, Retry-After). Each
job streams its events to the asyncio side through loop.call_soon_threadsafe; the HTTP side sets
job.cancelled when the client goes away, and the worker stops that generation at the next token
(or the next prompt step) and moves on. Every generation reuses the KV cache rows of the previous
one that match its prompt (prompt cache), unless the request says cache_prompt: false. Requests
are tokenized in the HTTP side's threads, with `Engine.tokenizer` (it lets the event loop run
meanwhile).
"""

from __future__ import annotations

import copy
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from vkdecode.reasoning import CONTENT, REASONING, feed_token, make_parser
from vkdecode.serve.requests import ApiError, GenRequest, StopScanner

log = logging.getLogger("uvicorn.error")  # the server's error log (uvicorn sets it up, --log-level)


@dataclass
class Job:
    req: GenRequest
    loop: object  # the asyncio loop that reads `events`
    events: object  # asyncio.Queue of (kind, data)
    cancelled: threading.Event = field(default_factory=threading.Event)
    seq: int = -1  # arrival order

    def emit(self, kind: str, data) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, data))
        except RuntimeError:  # the loop is closed (server shutting down): nobody listens
            pass

    def cancel(self) -> None:
        self.cancelled.set()


class Progress:
    """One request's generation as the worker sees it: its reasoning split from its answer
    ("reasoning" and "text" events), stop strings (in the answer), tokens so far and times."""

    def __init__(self, job: Job, cached: int):
        self.job, self.cached = job, cached  # cached: leading prompt tokens the KV cache held
        self.scanner = StopScanner(job.req.stop)
        self.parser = make_parser(job.req.reasoning, job.req.prompt_tail)
        self.t0 = time.perf_counter()
        self.t_first = self.t_last = None
        self.n, self.finish, self.stats = 0, None, None

    def feed(self, text: str, finish_reason: str | None, stats=None) -> bool:
        """A generated token's text; True when the request is done (finished, a stop string, or
        its client gone)."""
        self.n += 1
        self.t_last = time.perf_counter()
        self.t_first = self.t_first or self.t_last
        if self.job.cancelled.is_set():
            return True
        pieces = [(CONTENT, text)]
        if self.parser is not None:
            pieces = feed_token(self.parser, text, finish_reason is not None)
        for channel, piece in pieces:
            if channel == REASONING:
                self.job.emit("reasoning", piece)
                continue
            piece, hit = self.scanner.feed(piece)
            if piece:
                self.job.emit("text", piece)
            if hit:
                self.finish = "stop"
                return True
        self.finish, self.stats = finish_reason, stats
        return finish_reason is not None


class Engine:
    reasoning: str | None = None  # the chat answers' reasoning format (vkdecode/reasoning.py), or None

    def __init__(self, model, model_id: str, max_queue: int = 8, own_model: bool = True):
        self.model, self.model_id, self.max_queue, self.own_model = model, model_id, max_queue, own_model
        self.created = int(time.time())
        self.tokenizer = gil_free_tokenizer(model.tokenizer)
        self._jobs: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._arrivals = itertools.count()
        self.waiting = 0
        self.running: Job | None = None
        self.started_order: list[int] = []  # arrival numbers in the order jobs ran (last 1000)
        self.counts = {"completed": 0, "cancelled": 0, "rejected_queue_full": 0, "failed": 0}
        self.tokens = {"prompt": 0, "prompt_cached": 0, "prompt_run": 0, "generated": 0}
        self.decode = {"tokens": 0, "seconds": 0.0}  # tokens after each request's first, and their time
        self.last: dict = {}
        self.step = _step_summary(model.executor)
        self._thread = threading.Thread(target=self._work, name="vkdecode-serve-worker", daemon=True)
        self._thread.start()

    # -- the asyncio side -----------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        with self._lock:
            if self.waiting >= self.max_queue:
                self.counts["rejected_queue_full"] += 1
                # 429, not 503: the server is up and will answer once the queue drains (503 is for
                # shutting down); clients such as the openai package retry a 429 after Retry-After
                raise ApiError(
                    429,
                    f"too many requests: {self.waiting} are already waiting for the device (queue "
                    f"limit {self.max_queue}, --max-queue); retry after a second",
                    code="queue_full",
                    kind="rate_limit_error",
                )
            job.seq = next(self._arrivals)
            self.waiting += 1
            self._jobs.put(job)

    def metrics(self) -> dict:
        with self._lock:
            return {
                "model": self.model_id,
                "mode": self.model.mode,
                "device": self.model.device.info.name,
                "ctx": self.model.executor.ctx,
                "queue": {
                    "waiting": self.waiting,
                    "running": self.running is not None,
                    "max_queue": self.max_queue,
                },
                "requests": dict(self.counts),
                "tokens": dict(self.tokens),
                "decode_tok_s": self.decode["tokens"] / self.decode["seconds"]
                if self.decode["seconds"]
                else 0.0,
                "kv_cache_tokens": len(self.model.kv),
                "last_request": dict(self.last),
                "step": self.step,
                "validation_errors": len(getattr(self.model.device, "validation_errors", [])),
            }

    def close(self, timeout: float = 60.0) -> None:
        """Stop after the running job (cancelled), drop the waiting ones, free the model."""
        with self._lock:
            if self.running is not None:
                self.running.cancel()
            self.max_queue = 0  # refuse anything new
        self._jobs.put(None)
        self._thread.join(timeout)
        if self.own_model and not self._thread.is_alive():
            self.model.close()

    # -- the worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            with self._lock:
                self.waiting -= 1
                self.running = job
                self.started_order = self.started_order[-999:] + [job.seq]
            try:
                if self.max_queue == 0:  # closing: jobs still waiting are told, not run
                    job.emit("error", ApiError(503, "the server is shutting down", code="shutting_down"))
                else:
                    self._run(job)
            finally:
                with self._lock:
                    self.running = None

    def _run(self, job: Job) -> None:
        req, model = job.req, self.model
        if job.cancelled.is_set():
            self._count("cancelled")
            return
        p = Progress(job, model.kv.reusable(req.prompt_ids) if req.cache_prompt else 0)
        gen = model.stream_generate(
            prompt_ids=req.prompt_ids,
            max_tokens=req.max_tokens,
            temp=req.temp,
            top_k=req.top_k,
            top_p=req.top_p,
            seed=req.seed,
            prompt_cache=req.cache_prompt,
            should_stop=job.cancelled.is_set,
        )
        try:
            for r in gen:
                if p.feed(r.text, r.finish_reason, r.stats):
                    break
        except Exception:  # any failure ends this request only, with a 500 body (logged)
            log.exception("generation failed (request %d)", job.seq)
            self._fail([job])
            return
        finally:
            gen.close()
        self._complete(p)

    def _fail(self, jobs: list[Job]) -> None:
        """A generation failed (the caller logged why): its requests end with a 500 body."""
        self.model.kv.clear()  # the device may not hold what the tracker says any more
        for job in jobs:
            self._count("failed")
            job.emit(
                "error",
                ApiError(
                    500,
                    "internal error while generating (the server's log has the details)",
                    code="generation_failed",
                ),
            )

    def _complete(self, p: Progress) -> None:
        """A request's generation ended (or its client went away): the done event and the counts."""
        job, req, n = p.job, p.job.req, p.n
        if job.cancelled.is_set():
            self._count("cancelled", generated=n)
            return
        rest = p.scanner.flush()  # held back as a possible stop-string start, and none came
        if rest:
            job.emit("text", rest)
        prompt, cached, stats = len(req.prompt_ids), p.cached, p.stats or {}
        decode_s = (p.t_last - p.t_first) if n > 1 else 0.0
        timings = {
            "prompt_tokens_run": prompt - cached,
            "ttft_s": (p.t_first or p.t0) - p.t0,
            "decode_tok_s": (n - 1) / decode_s if decode_s > 0 else 0.0,
            "total_s": time.perf_counter() - p.t0,
        }
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": n,
            "total_tokens": prompt + n,
            "prompt_tokens_details": {"cached_tokens": cached},
        }
        with self._lock:
            self.counts["completed"] += 1
            for k, v in (
                ("prompt", prompt),
                ("prompt_cached", cached),
                ("prompt_run", prompt - cached),
                ("generated", n),
            ):
                self.tokens[k] += v
            self.decode["tokens"] += max(0, n - 1)
            self.decode["seconds"] += decode_s
            self.last = dict(
                usage,
                finish_reason=p.finish,
                **timings,
                **{
                    k: stats[k]
                    for k in (
                        "host_us_per_token",
                        "gpu_us_per_token",
                        "executed_per_token",
                        "host_calls_per_token",
                    )
                    if k in stats
                },
            )
        job.emit("done", {"finish_reason": p.finish, "usage": usage, "timings": timings})

    def _count(self, what: str, generated: int = 0) -> None:
        with self._lock:
            self.counts[what] += 1
            self.tokens["generated"] += generated
            self.last = {"cancelled_after_tokens": generated} if what == "cancelled" else self.last


class _EncodeReleasingGil:
    """HF tokenizers' encode() holds the GIL for the whole call (0.7 s for 800 KB of text), so even
    from a thread it stalls the event loop (and /health); encode_batch() releases it, and its _fast
    variant (no character offsets) is also quicker to free (70 ms less with the GIL held)."""

    def __init__(self, hf):
        self._hf = hf
        self._batch = getattr(hf, "encode_batch_fast", None) or hf.encode_batch

    def encode(self, text, add_special_tokens=True):
        return self._batch([text], add_special_tokens=add_special_tokens)[0]

    def __getattr__(self, name):
        return getattr(self._hf, name)


def gil_free_tokenizer(tokenizer):
    """A copy of the model's Tokenizer whose encoding lets other Python threads run; the same ids."""
    hf = getattr(tokenizer, "tok", None)
    if not hasattr(hf, "encode_batch"):
        return tokenizer
    t = copy.copy(tokenizer)
    t.tok = _EncodeReleasingGil(hf)
    return t


def _step_summary(executor) -> dict:
    """The recorded step's regions and what it binds: fixed at load time, so computed once."""
    rows = executor.region_stats()
    total = lambda k: sum(r[k] for r in rows)
    return {
        "regions": len(rows),
        "dispatches": total("dispatches"),
        "barriers": total("barriers"),
        "descriptor_sets": total("descriptor_sets"),
        "weight_bytes": total("weight_bytes"),
        "region_table": rows,
    }

"""`vkdecode serve --parallel N`: up to N requests decode together, in batched steps (continuous
batching over executors/batch.py).

Between two batched steps the worker starts a waiting request when a slot is free, and runs its
prompt a turn at a time: after each batched step of the others, one turn of prompt_rows() rows of
work (about one widest prompt chunk), until it has its first token and joins the batch. So a long
prompt delays the running requests' tokens by about one chunk each, not by its whole length. One
prompt runs at a time (it goes through the decoder's KV cache: executors/batch.py). Each slot keeps
the rows of the request that left it (executors/slot_cache.py), so a chat's next turn reuses its
rows whatever ran between; cached_tokens counts them. A request that
finishes, hits a stop string or whose client went away (while decoding or mid-prompt) leaves at
once and frees its slot; the next step runs at the narrowest recorded width that holds the rest.
The queue in front is the same bounded FIFO as the one-at-a-time engine's (a full queue is refused
with 429 and Retry-After). A request alone (none other live, none joining) decodes on the plain
decode step, as fast as the one-at-a-time engine (executors/solo.py); it moves into the batch when
the next request's prompt starts, and the last one left of a batch moves back out.
"""

from __future__ import annotations

import logging
import queue
import time

from vkdecode.serve.engine import Engine, Job, Progress

log = logging.getLogger("uvicorn.error")  # the server's error log, as engine.py's


def parallel_widths(n: int) -> tuple[int, ...]:
    """The batch widths recorded for --parallel n: powers of two below n, and n itself."""
    out, w = [], 1
    while w < n:
        out.append(w)
        w *= 2
    return tuple(out + [n])


# A joining prompt's turn at most: the others wait a turn for their next token, and a 2048-row
# chunk of Llama-3.1-8B takes ~190 ms on an H100 against ~53 ms for 512 rows (wider chunks pay for
# a prompt alone, executors/prefill.py WIDTHS_GPU, not for the tokens it holds up)
TURN_ROWS_MAX = 512


def prompt_rows(decoder) -> int:
    """Rows of prompt work a joining request runs between two batched steps: the widest prompt
    chunk up to TURN_ROWS_MAX (its prompt's last tokens, decode steps of 1 row each, run together
    up to as many)."""
    widths = decoder.prefill.widths if decoder.prefill is not None else ()
    return min(max(widths, default=16), TURN_ROWS_MAX)


def make_engine(
    model, model_id: str, max_queue: int = 8, parallel: int = 1, own_model: bool = True, reasoning=None
) -> Engine:
    """The one-at-a-time Engine for parallel 1, else a BatchEngine of `parallel` slots; reasoning:
    the format chat answers' reasoning is split by (None: the raw text)."""
    if parallel <= 1:
        engine = Engine(model, model_id, max_queue, own_model)
    else:
        engine = BatchEngine(model, model_id, max_queue, own_model, parallel)
    engine.reasoning = reasoning  # read per request, by the HTTP side
    return engine


class BatchEngine(Engine):
    def __init__(self, model, model_id: str, max_queue: int = 8, own_model: bool = True, parallel: int = 4):
        self.parallel = parallel
        self.live: dict[int, Progress] = {}  # job.seq -> its generation, while in the batch
        self.joining: Progress | None = None  # the request whose prompt is running, a piece a step
        self.batch = model.batch(parallel_widths(parallel))  # built and recorded before any request
        self.prompt_rows = prompt_rows(model.decoder)
        # the engine thread's seconds: in batched steps (collecting one, sending the next: the GPU's
        # time unless the host is slower), in prompt pieces, and handing tokens to the requests
        self.seconds = {"steps": 0.0, "prompts": 0.0, "tokens": 0.0}
        super().__init__(model, model_id, max_queue, own_model)

    def metrics(self) -> dict:
        m = super().metrics()
        with self._lock:
            m["queue"]["running_requests"] = len(self.live) + (self.joining is not None)
            m["queue"]["parallel"] = self.parallel
        m["batch_steps"] = dict(self.batch.steps)  # steps run per width
        if self.batch.pick:  # a GPU's calibrated choice: sequences -> width (executors/batch_pick.py)
            m["batch_width_for"] = dict(self.batch.pick)
            m["batch_width_ms"] = dict(self.batch.pick_ms or {})  # the calibration's step times
        m["solo_steps"] = self.batch.solo.steps  # tokens of a request alone, on the plain step
        m["engine_s"] = {k: round(v, 4) for k, v in self.seconds.items()}
        return m

    def close(self, timeout: float = 60.0) -> None:
        with self._lock:
            for p in [*self.live.values(), self.joining]:
                if p is not None:
                    p.job.cancel()
        super().close(timeout)

    # -- the worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        from vkdecode.batch import BatchGenerator

        gen = BatchGenerator(self.batch, self.model.tokenizer, self.model.kv)
        try:
            while self._admit(gen):
                if self.joining is not None:
                    t = time.perf_counter()
                    self._prefill(gen)
                    self.seconds["prompts"] += time.perf_counter() - t
                if self.live:
                    self._step(gen)
        finally:
            gen.close()
            for seq in list(self.live):
                self._leave(gen, seq)
            if self.joining is not None:
                self._complete(self.joining)  # cancelled by close()

    def _admit(self, gen) -> bool:
        """Start the next waiting request's prompt while none is running and a slot is free (block
        while nothing runs); False when the engine is closing."""
        while self.joining is None and gen.free:
            try:
                job = self._jobs.get(block=not self.live)
            except queue.Empty:
                return True
            if job is None:
                return False
            with self._lock:
                self.waiting -= 1
                self.started_order = self.started_order[-999:] + [job.seq]
            self._start(gen, job)
        return True

    def _start(self, gen, job: Job) -> None:
        from vkdecode.sampling import SamplingParams

        req = job.req
        if self.max_queue == 0:  # closing: jobs still waiting are told, not run
            from vkdecode.serve.requests import ApiError

            job.emit("error", ApiError(503, "the server is shutting down", code="shutting_down"))
            return
        if job.cancelled.is_set():
            self._count("cancelled")
            return
        params = SamplingParams(req.temp, req.top_k, req.top_p, req.seed)
        try:
            gen.start(job.seq, req.prompt_ids, req.max_tokens, params, req.cache_prompt)
        except Exception:  # this request's prompt was refused: it alone ends with a 500 body (logged)
            log.exception("generation failed (request %d)", job.seq)
            self._fail([job])
            return
        p = Progress(job, self.batch.joining.cached)  # from its slot's cache or the decoder's
        with self._lock:
            self.joining = p
            self.running = self.running or job

    def _prefill(self, gen) -> None:
        """One turn of the joining request's prompt, between two batched steps of the others."""
        p = self.joining
        if p.job.cancelled.is_set():  # its client went away mid-prompt: the slot is free
            gen.remove(p.job.seq)
            self._joined(None)
            self._complete(p)
            return
        try:
            r = gen.prefill(self.prompt_rows)
        except Exception:  # this request's prompt failed: it alone ends with a 500 body (logged)
            log.exception("generation failed (request %d)", p.job.seq)
            self._joined(None)
            self._fail([p.job])
            return
        if r is None:
            return
        self._joined(p)
        if p.feed(r.text, r.finish_reason):
            self._leave(gen, r.index)

    def _joined(self, p: Progress | None) -> None:
        """The joining request is in the batch now (p), or gone (None)."""
        with self._lock:
            if p is not None:
                self.live[p.job.seq] = p
            self.joining = None
            self._running()

    def _step(self, gen) -> None:
        t = time.perf_counter()
        try:
            responses = gen.next()
        except Exception:  # the batch's step failed: the requests in it and joining it end with a 500
            log.exception("batched step failed (requests %s)", sorted(self.live))
            jobs = [p.job for p in [*self.live.values(), self.joining] if p is not None]
            gen.close()
            with self._lock:
                self.live.clear()
                self.joining = None
                self._running()
            self._fail(jobs)
            return
        t1 = time.perf_counter()
        for r in responses:
            if self.live[r.index].feed(r.text, r.finish_reason):
                self._leave(gen, r.index)
        for seq in [s for s, p in self.live.items() if p.job.cancelled.is_set()]:
            self._leave(gen, seq)
        self.seconds["steps"] += t1 - t
        self.seconds["tokens"] += time.perf_counter() - t1

    def _leave(self, gen, seq: int) -> None:
        """The request is done (finished, a stop string, or its client gone): its slot is free."""
        gen.remove(seq)
        with self._lock:
            p = self.live.pop(seq)
            self._running()
        self._complete(p)

    def _running(self) -> None:
        """`running` (the one-at-a-time engine's field): a request in the batch or joining it."""
        ps = [*self.live.values(), self.joining]
        self.running = next((q.job for q in ps if q is not None), None)

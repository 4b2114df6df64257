"""`vkdecode serve --parallel N`: up to N requests decode together, in batched steps (continuous
batching over executors/batch.py).

Between two batched steps the worker takes waiting requests while a slot is free: each runs its
prompt (the other requests wait for that long, as they would behind it one at a time) and joins
the batch with its first token. A request that finishes, hits a stop string or whose client went
away leaves at once and frees its slot; the next step runs at the narrowest recorded width that
holds the rest. The queue in front is the same bounded FIFO as the one-at-a-time engine's (a
full queue is refused with 429 and Retry-After).
"""

from __future__ import annotations

import logging
import queue

from vkdecode.serve.engine import Engine, Job, Progress

log = logging.getLogger("uvicorn.error")  # the server's error log, as engine.py's


def parallel_widths(n: int) -> tuple[int, ...]:
    """The batch widths recorded for --parallel n: powers of two below n, and n itself."""
    out, w = [], 1
    while w < n:
        out.append(w)
        w *= 2
    return tuple(out + [n])


def make_engine(
    model, model_id: str, max_queue: int = 8, parallel: int = 1, own_model: bool = True
) -> Engine:
    """The one-at-a-time Engine for parallel 1, else a BatchEngine of `parallel` slots."""
    if parallel <= 1:
        return Engine(model, model_id, max_queue, own_model)
    return BatchEngine(model, model_id, max_queue, own_model, parallel)


class BatchEngine(Engine):
    def __init__(self, model, model_id: str, max_queue: int = 8, own_model: bool = True, parallel: int = 4):
        self.parallel = parallel
        self.live: dict[int, Progress] = {}  # job.seq -> its generation, while in the batch
        self.batch = model.batch(parallel_widths(parallel))  # built and recorded before any request
        super().__init__(model, model_id, max_queue, own_model)

    def metrics(self) -> dict:
        m = super().metrics()
        with self._lock:
            m["queue"]["running_requests"] = len(self.live)
            m["queue"]["parallel"] = self.parallel
        m["batch_steps"] = dict(self.batch.steps)  # steps run per width
        return m

    def close(self, timeout: float = 60.0) -> None:
        with self._lock:
            for p in self.live.values():
                p.job.cancel()
        super().close(timeout)

    # -- the worker thread ----------------------------------------------------------------------
    def _work(self) -> None:
        from vkdecode.batch import BatchGenerator

        gen = BatchGenerator(self.batch, self.model.tokenizer, self.model.kv)
        try:
            while self._admit(gen):
                if self.live:
                    self._step(gen)
        finally:
            gen.close()
            for seq in list(self.live):
                self._leave(gen, seq)

    def _admit(self, gen) -> bool:
        """Take waiting requests while the batch has room (block while nothing runs); False when
        the engine is closing."""
        while gen.free:
            try:
                job = self._jobs.get(block=not self.live)
            except queue.Empty:
                return True
            if job is None:
                return False
            with self._lock:
                self.waiting -= 1
                self.started_order = self.started_order[-999:] + [job.seq]
            self._join(gen, job)
        return True

    def _join(self, gen, job: Job) -> None:
        from vkdecode.sampling import SamplingParams

        req = job.req
        if self.max_queue == 0:  # closing: jobs still waiting are told, not run
            from vkdecode.serve.requests import ApiError

            job.emit("error", ApiError(503, "the server is shutting down", code="shutting_down"))
            return
        if job.cancelled.is_set():
            self._count("cancelled")
            return
        p = Progress(job, self.model.kv.reusable(req.prompt_ids) if req.cache_prompt else 0)
        params = SamplingParams(req.temp, req.top_k, req.top_p, req.seed)
        try:
            r = gen.insert(
                job.seq, req.prompt_ids, req.max_tokens, params, req.cache_prompt, job.cancelled.is_set
            )
        except Exception:  # this request's prompt failed: it alone ends with a 500 body (logged)
            log.exception("generation failed (request %d)", job.seq)
            self._fail([job])
            return
        with self._lock:
            self.live[job.seq] = p
            self.running = self.running or job
        if r is None or p.feed(r.text, r.finish_reason):
            self._leave(gen, job.seq)

    def _step(self, gen) -> None:
        try:
            responses = gen.next()
        except Exception:  # the batch's step failed: every request in it ends with a 500 body
            log.exception("batched step failed (requests %s)", sorted(self.live))
            jobs = [p.job for p in self.live.values()]
            gen.close()
            with self._lock:
                self.live.clear()
                self.running = None
            self._fail(jobs)
            return
        for r in responses:
            if self.live[r.index].feed(r.text, r.finish_reason):
                self._leave(gen, r.index)
        for seq in [s for s, p in self.live.items() if p.job.cancelled.is_set()]:
            self._leave(gen, seq)

    def _leave(self, gen, seq: int) -> None:
        """The request is done (finished, a stop string, or its client gone): its slot is free."""
        gen.remove(seq)
        with self._lock:
            p = self.live.pop(seq)
            self.running = next((q.job for q in self.live.values()), None)
        self._complete(p)

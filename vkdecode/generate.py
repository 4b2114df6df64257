"""The generation loop: prompt tokens through the decode step one at a time, then decode until EOS,
max_tokens or the end of the context. Greedy decoding is argmax on the GPU. With a KVPrefix
(vkdecode/prompt_cache.py) the leading prompt tokens whose K/V rows are already in the cache are
skipped (reuse=True) and the rows written are tracked for the next generation."""
from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from vkdecode.errors import ContextError


@dataclass
class GenerationResponse:
    """One generated token, in the manner of mlx-lm's stream_generate."""
    text: str                     # new text this token completes (may be "" mid UTF-8 sequence)
    token: int
    finish_reason: str | None     # None while generating, then "stop" (EOS) or "length"
    stats: dict | None = None     # the run summary, on the last response only


@dataclass
class RunSummary:
    mode: str
    prompt_tokens: int
    generated_tokens: int
    cached_tokens: int            # leading prompt tokens not run: their K/V rows were in the cache
    load_s: float
    ttft_s: float                 # first prompt token run submitted -> first new token read back
    decode_tok_s: float           # generated tokens after the first, per second of wall time
    host_us_per_token: float      # median over decode steps: token known -> submit returned
    gpu_us_per_token: float       # median over decode steps, from timestamp queries
    wall_us_per_token: float
    per_token_counters: dict = field(default_factory=dict)   # median decode step's counters

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def stream_generate(executor, tokenizer, prompt_ids: list[int], max_tokens: int = 256,
                    load_s: float = 0.0, stop_at_eos: bool = True, sampling=None, kv=None,
                    reuse: bool = False, should_stop=None) -> Iterator[GenerationResponse]:
    """kv: the executor's KVPrefix (tracked whenever given); reuse: skip the prompt tokens it
    already holds. should_stop(): checked between prompt steps; True ends the generation at once,
    without a response (a client gone while its long prompt runs)."""
    from vkdecode.sampling import SamplingParams
    ctx = executor.ctx
    executor.set_sampling(sampling or SamplingParams())
    if not prompt_ids:
        raise ContextError("the prompt is empty: nothing to decode from")
    if len(prompt_ids) >= ctx:
        raise ContextError(f"the prompt has {len(prompt_ids)} tokens but the context holds {ctx}; "
                           f"raise --ctx or shorten the prompt")
    start = kv.reusable(prompt_ids) if kv is not None and reuse else 0
    if kv is not None:
        kv.keep(start)
    # one generation's stats only: kept across generations they grow without bound (~1 KB/token)
    executor.token_stats.clear()
    first_stat = 0
    t0 = time.perf_counter()
    for pos in range(start, len(prompt_ids)):
        if should_stop is not None and should_stop():
            return
        nxt = executor.step(prompt_ids[pos], pos)
        if kv is not None:
            kv.wrote(prompt_ids[pos], pos)
    ttft = time.perf_counter() - t0
    decode_start = len(executor.token_stats)
    t1 = time.perf_counter()
    stream = tokenizer.stream()
    pos, generated = len(prompt_ids), 0
    # every later token comes from decode(): replay pipelines it (the GPU feeds each step the
    # previous token), so the loop below never waits on the GPU for the next submit
    steps = executor.decode(nxt, pos, max(0, min(max_tokens - 1, ctx - pos)))
    try:
        while True:
            generated += 1
            eos = nxt in tokenizer.eos_ids
            reason = "stop" if eos and stop_at_eos else None
            if reason is None and generated >= max_tokens:
                reason = "length"
            if reason is None and pos >= ctx:
                reason = "length"     # the KV cache is full: never write past it
            text = "" if reason == "stop" else stream.add(nxt)
            if reason is not None:
                steps.close()
                text += stream.flush()
                wall = time.perf_counter() - t1
                decode = executor.token_stats[decode_start:]
                summary = _summary(executor, len(prompt_ids), start, generated, load_s, ttft, wall, decode,
                                   executor.token_stats[first_stat:])
                yield GenerationResponse(text, nxt, reason, summary.as_dict())
                return
            yield GenerationResponse(text, nxt, None)
            fed = nxt
            nxt = next(steps)           # the step at `pos`, fed `fed`, has completed
            if kv is not None:
                kv.wrote(fed, pos)
            pos += 1
    finally:
        steps.close()        # a consumer that stops early: wait for the steps still in flight


def _summary(executor, n_prompt, n_cached, n_gen, load_s, ttft, wall, decode, all_steps) -> RunSummary:
    steps = decode or all_steps
    med = steps[len(steps) // 2]
    return RunSummary(
        mode=executor.mode, prompt_tokens=n_prompt, generated_tokens=n_gen, cached_tokens=n_cached,
        load_s=load_s, ttft_s=ttft,
        decode_tok_s=(len(decode) / wall) if decode and wall > 0 else 0.0,
        host_us_per_token=statistics.median(s.host_us for s in steps),
        gpu_us_per_token=statistics.median(s.gpu_us for s in steps),
        wall_us_per_token=statistics.median(s.wall_us for s in steps),
        per_token_counters=med.counters.as_dict())

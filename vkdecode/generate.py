"""The generation loop: the prompt through executor.prefill (chunks of batched prompt work when the
executor has them, executors/prefill.py; the last prompt token through the decode step), then
decode until EOS, max_tokens or the end of the context. Greedy decoding is argmax on the GPU. With
a KVPrefix (vkdecode/prompt_cache.py) the leading prompt tokens whose K/V rows are already in the
cache are skipped (reuse=True: prefill starts at the first uncached position) and the rows written
are tracked for the next generation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from vkdecode.errors import ContextError, UsageError


@dataclass
class GenerationResponse:
    """One generated token, in the manner of mlx-lm's stream_generate."""

    text: str  # new text this token completes (may be "" mid UTF-8 sequence)
    token: int
    finish_reason: str | None  # None while generating, then "stop" (EOS) or "length"
    stats: dict | None = None  # the run summary, on the last response only
    # the text split by a reasoning parser (vkdecode/reasoning.py), when the generation has one:
    # a marker split across tokens comes out with a later token; else content is text
    reasoning: str = ""
    content: str | None = None

    def __post_init__(self):
        if self.content is None:
            self.content = self.text


@dataclass
class RunSummary:
    mode: str
    prompt_tokens: int
    generated_tokens: int
    cached_tokens: int  # leading prompt tokens not run: their K/V rows were in the cache
    load_s: float
    ttft_s: float  # first prompt token run submitted -> first new token read back
    decode_tok_s: float  # generated tokens after the first, per second of wall time
    # Per token, over the decode steps (the prompt steps when there are none), all means so that
    # they add up: wall = decode wall time / tokens (= 1e6 / decode_tok_s); GPU = the timestamp
    # span of the steps / tokens (spans on one queue never overlap, so GPU <= wall); host = the
    # host's enqueue time (token known -> submit returned) / tokens.
    host_us_per_token: float
    gpu_us_per_token: float
    wall_us_per_token: float
    executed_per_token: dict = field(default_factory=dict)  # as `vkdecode stats` (vkdecode/stats.py)
    host_calls_per_token: dict = field(default_factory=dict)  # as `vkdecode stats`, mean per token

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def stream_generate(
    decoder,
    tokenizer,
    prompt_ids: list[int],
    max_tokens: int = 256,
    load_s: float = 0.0,
    stop_at_eos: bool = True,
    sampling=None,
    kv=None,
    reuse: bool = False,
    should_stop=None,
) -> Iterator[GenerationResponse]:
    """decoder: an executors.decoder.Decoder (or a bare step executor: no prompt chunks, no
    drafts). kv: the decoder's KVPrefix (tracked whenever given); reuse: skip the prompt tokens it
    already holds. should_stop(): checked between prompt steps; True ends the generation at once,
    without a response (a client gone while its long prompt runs)."""
    from vkdecode.executors.decoder import Decoder
    from vkdecode.sampling import SamplingParams

    if not isinstance(decoder, Decoder):
        decoder = Decoder(decoder)
    executor = decoder.executor
    ctx = executor.ctx
    executor.set_sampling(sampling or SamplingParams())
    if not prompt_ids:
        raise ContextError("the prompt is empty: nothing to decode from")
    # a prompt of exactly ctx tokens fits: its last step runs at position ctx - 1 and gives one token
    if len(prompt_ids) > ctx:
        raise ContextError(
            f"the prompt has {len(prompt_ids)} tokens but the context holds {ctx}; "
            f"raise --ctx or shorten the prompt"
        )
    # the embedding reads row `token` on the GPU: an id past the table would leave the step's input
    # stale (a chunked table writes only the rows it holds), so it must never reach a step
    vocab = getattr(getattr(executor, "program", None), "meta", {}).get("vocab_size")
    bad = [t for t in prompt_ids if vocab is not None and not 0 <= int(t) < vocab]
    if bad:
        raise UsageError(f"prompt token id {bad[0]} is outside the model's vocabulary 0..{vocab - 1}")
    start = kv.reusable(prompt_ids) if kv is not None and reuse else 0
    if kv is not None:
        kv.keep(start)
    # one generation's stats only: kept across generations they grow without bound (~1 KB/token)
    decoder.clear_stats()
    first_stat = 0
    t0 = time.perf_counter()
    nxt = decoder.run_prompt(prompt_ids[start:], start, should_stop, kv.wrote if kv is not None else None)
    if nxt is None:  # should_stop() said so between two chunks or steps
        return
    if kv is not None and reuse:
        kv.save()  # recurrent states: the next turn's prefix (prompt_cache.py)
    ttft = time.perf_counter() - t0
    decode_start = len(executor.token_stats)
    t1 = time.perf_counter()
    stream = tokenizer.stream()
    pos, generated = len(prompt_ids), 0
    # every later token comes from decode(): replay pipelines it (the GPU feeds each step the
    # previous token), so the loop below never waits on the GPU for the next submit
    n_steps = max(0, min(max_tokens - 1, ctx - pos))
    steps = decoder.decode(nxt, pos, n_steps, prompt_ids)
    try:
        while True:
            generated += 1
            eos = nxt in tokenizer.eos_ids
            reason = "stop" if eos and stop_at_eos else None
            if reason is None and generated >= max_tokens:
                reason = "length"
            if reason is None and pos >= ctx:
                reason = "length"  # the KV cache is full: never write past it
            text = "" if reason == "stop" else stream.add(nxt)
            if reason is not None:
                wall = time.perf_counter() - t1  # before close(): it waits for discarded steps
                steps.close()
                text += stream.flush()
                decode = executor.token_stats[decode_start:]
                summary = _summary(
                    executor,
                    len(prompt_ids),
                    start,
                    generated,
                    load_s,
                    ttft,
                    wall,
                    decode,
                    executor.token_stats[first_stat:],
                )
                yield GenerationResponse(text, nxt, reason, summary.as_dict())
                return
            yield GenerationResponse(text, nxt, None)
            fed = nxt
            nxt = next(steps)  # the step at `pos`, fed `fed`, has completed
            if kv is not None:
                kv.wrote(fed, pos)
            pos += 1
    finally:
        steps.close()  # a consumer that stops early: wait for the steps still in flight


def _summary(executor, n_prompt, n_cached, n_gen, load_s, ttft, wall, decode, all_steps) -> RunSummary:
    from vkdecode.stats import executed_per_token, host_calls_per_token, mean_counters

    steps = decode or all_steps
    n = max(1, len(steps))
    return RunSummary(
        mode=executor.mode,
        prompt_tokens=n_prompt,
        generated_tokens=n_gen,
        cached_tokens=n_cached,
        load_s=load_s,
        ttft_s=ttft,
        decode_tok_s=(len(decode) / wall) if decode and wall > 0 else 0.0,
        host_us_per_token=sum(s.host_us for s in steps) / n,
        gpu_us_per_token=sum(s.gpu_us for s in steps) / n,
        wall_us_per_token=wall * 1e6 / len(decode) if decode else sum(s.wall_us for s in steps) / n,
        executed_per_token=executed_per_token(executor) if hasattr(executor, "items") else {},
        host_calls_per_token=host_calls_per_token(mean_counters(steps)),
    )

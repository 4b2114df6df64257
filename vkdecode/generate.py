"""The generation loop: the prompt through executor.prefill (chunks of batched prompt work when the
executor has them, executors/prefill.py; the last prompt token through the decode step), then
decode until EOS, max_tokens or the end of the context. Greedy decoding is argmax on the GPU."""
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
    load_s: float
    ttft_s: float                 # first prompt token submitted -> first new token read back
    decode_tok_s: float           # generated tokens after the first, per second of wall time
    host_us_per_token: float      # median over decode steps: token known -> submit returned
    gpu_us_per_token: float       # median over decode steps, from timestamp queries
    wall_us_per_token: float
    per_token_counters: dict = field(default_factory=dict)   # median decode step's counters

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def stream_generate(executor, tokenizer, prompt_ids: list[int], max_tokens: int = 256,
                    load_s: float = 0.0, stop_at_eos: bool = True, sampling=None) -> Iterator[GenerationResponse]:
    from vkdecode.sampling import SamplingParams
    ctx = executor.ctx
    executor.set_sampling(sampling or SamplingParams())
    if not prompt_ids:
        raise ContextError("the prompt is empty: nothing to decode from")
    if len(prompt_ids) >= ctx:
        raise ContextError(f"the prompt has {len(prompt_ids)} tokens but the context holds {ctx}; "
                           f"raise --ctx or shorten the prompt")
    # one generation's stats only: kept across generations they grow without bound (~1 KB/token)
    executor.token_stats.clear()
    first_stat = 0
    t0 = time.perf_counter()
    if hasattr(executor, "prefill"):
        nxt = executor.prefill(prompt_ids, 0)
    else:      # an executor without prompt chunks (test doubles): the prompt through step()
        for pos, tok in enumerate(prompt_ids):
            nxt = executor.step(tok, pos)
    ttft = time.perf_counter() - t0
    decode_start = len(executor.token_stats)
    t1 = time.perf_counter()
    stream = tokenizer.stream()
    pos, generated = len(prompt_ids), 0
    # every later token comes from decode(): replay pipelines it (the GPU feeds each step the
    # previous token), so the loop below never waits on the GPU for the next submit
    n_steps = max(0, min(max_tokens - 1, ctx - pos))
    spec = getattr(executor, "speculative", None)
    if spec is not None:     # greedy only (Speculative refuses a sampling program)
        steps = spec.run(list(prompt_ids), nxt, pos, n_steps)
    else:
        steps = executor.decode(nxt, pos, n_steps)
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
            summary = _summary(executor, len(prompt_ids), generated, load_s, ttft, wall, decode,
                               executor.token_stats[first_stat:])
            yield GenerationResponse(text, nxt, reason, summary.as_dict())
            return
        yield GenerationResponse(text, nxt, None)
        nxt = next(steps)
        pos += 1


def _summary(executor, n_prompt, n_gen, load_s, ttft, wall, decode, all_steps) -> RunSummary:
    steps = decode or all_steps
    med = steps[len(steps) // 2]
    return RunSummary(
        mode=executor.mode, prompt_tokens=n_prompt, generated_tokens=n_gen, load_s=load_s, ttft_s=ttft,
        decode_tok_s=(len(decode) / wall) if decode and wall > 0 else 0.0,
        host_us_per_token=statistics.median(s.host_us for s in steps),
        gpu_us_per_token=statistics.median(s.gpu_us for s in steps),
        wall_us_per_token=statistics.median(s.wall_us for s in steps),
        per_token_counters=med.counters.as_dict())

"""Many prompts at once, in the manner of mlx-lm's batch_generate: a list of prompts in, a list of
texts (or one stream of per-sequence responses) out, over executors/batch.py's batched steps.

Prompts join the batch while it has a free slot (a longer list waits its turn), each after its
prompt has run; between two steps a sequence that finished (EOS, its max_tokens, the end of the
context) leaves, and the next step runs at the narrowest recorded width that holds the rest.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass
class BatchResponse:
    """One generated token of one sequence of the batch."""

    index: int  # the prompt's place in the list given
    text: str  # new text this token completes (may be "" mid UTF-8 sequence)
    token: int
    finish_reason: str | None  # None while generating, then "stop" (EOS) or "length"


def per_prompt(value, n: int, what: str) -> list:
    """One value for every prompt: a list of n values as given, else the value n times."""
    from vkdecode.errors import UsageError

    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise UsageError(f"{what}: {len(value)} values for {n} prompts")
        return list(value)
    return [value] * n


class _Seq:
    def __init__(self, index: int, stream, max_tokens: int):
        self.index, self.stream, self.max_tokens, self.generated = index, stream, max_tokens, 0


def stream_generate_batch(
    batch,
    tokenizer,
    prompts: list[list[int]],
    max_tokens=256,
    sampling=None,
    kv=None,
    reuse: bool = False,
    stop_at_eos: bool = True,
) -> Iterator[BatchResponse]:
    """batch: an executors.batch.BatchDecode. max_tokens and sampling (SamplingParams): one for
    all prompts or a list of one per prompt. kv: the decoder's KVPrefix (tracked when given);
    reuse: skip the leading prompt tokens whose K/V rows the decoder's cache holds."""
    n = len(prompts)
    limits = per_prompt(max_tokens, n, "max_tokens")
    params = per_prompt(sampling, n, "sampling")
    waiting = deque(range(n))
    seqs: dict[int, _Seq] = {}  # slot -> sequence

    def emit(slot: int, tok: int):
        """The response for `tok` of the sequence in slot; a finished sequence leaves."""
        s = seqs[slot]
        s.generated += 1
        reason = "stop" if stop_at_eos and tok in tokenizer.eos_ids else None
        if reason is None and (s.generated >= s.max_tokens or batch.rows[slot].pos >= batch.ctx):
            reason = "length"
        text = "" if reason == "stop" else s.stream.add(tok)
        if reason is not None:
            text += s.stream.flush()
            batch.leave(slot)
            del seqs[slot]
        return BatchResponse(s.index, text, tok, reason)

    try:
        while waiting or seqs:
            while waiting and batch.free:
                i = waiting.popleft()
                if limits[i] < 1:
                    yield BatchResponse(i, "", -1, "length")
                    continue
                if kv is not None and not reuse:
                    kv.keep(0)
                slot, first = batch.join(prompts[i], params[i], kv)
                seqs[slot] = _Seq(i, tokenizer.stream(), limits[i])
                yield emit(slot, first)
            for slot, tok in batch.step().items():
                yield emit(slot, tok)
    finally:  # a consumer that stops early: the slots are free for the next batch
        for slot in list(seqs):
            batch.leave(slot)


def collect_texts(responses, n: int) -> list[str]:
    """The texts of n sequences' responses (stream_generate_batch), in the order of the prompts."""
    texts = [""] * n
    for r in responses:
        texts[r.index] += r.text
    return texts

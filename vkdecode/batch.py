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
    # as GenerationResponse's: the text split by a reasoning parser (a batch of chats), else content = text
    reasoning: str = ""
    content: str | None = None

    def __post_init__(self):
        if self.content is None:
            self.content = self.text


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


class BatchGenerator:
    """Sequences that join and leave a batch between steps (mlx-lm's BatchGenerator in spirit):
    insert() runs a prompt and gives its first token, next() steps every sequence once. A sequence
    leaves by itself when it finishes; remove() takes one out before (a client gone). start() and
    prefill() are insert() a piece at a time, for a caller that steps the others in between.

    batch: an executors.batch.BatchDecode; kv: the decoder's KVPrefix (tracked when given)."""

    def __init__(self, batch, tokenizer, kv=None, stop_at_eos: bool = True):
        self.batch, self.tokenizer, self.kv, self.stop_at_eos = batch, tokenizer, kv, stop_at_eos
        self.seqs: dict[int, _Seq] = {}  # slot -> sequence (the joining one's slot included)
        self.joining: int | None = None  # the slot of the sequence whose prompt is running

    @property
    def free(self) -> int:
        """Sequences that can join now."""
        return len(self.batch.free)

    def insert(
        self, index: int, prompt_ids, max_tokens: int, sampling=None, reuse: bool = False, should_stop=None
    ) -> BatchResponse | None:
        """Run the prompt, join, and give the response of its first token (None: should_stop()
        turned true during the prompt). reuse: skip the leading prompt tokens whose K/V rows the
        decoder's cache or a free slot holds. index: the caller's name for the sequence, in its
        responses."""
        if self.kv is not None and not reuse:
            self.kv.keep(0)
        joined = self.batch.join(prompt_ids, sampling, self.kv, should_stop, max_tokens - 1, reuse)
        if joined is None:
            return None
        slot, first = joined
        self.seqs[slot] = _Seq(index, self.tokenizer.stream(), max_tokens)
        return self._emit(slot, first)

    def start(self, index: int, prompt_ids, max_tokens: int, sampling=None, reuse: bool = False) -> int:
        """Begin a sequence's prompt (insert's arguments; one prompt at a time): prefill() runs it
        on. Returns its slot, taken until it leaves; batch.joining.cached: the prompt tokens reused."""
        if self.kv is not None and not reuse:
            self.kv.keep(0)
        slot = self.batch.begin(prompt_ids, sampling, self.kv, max_tokens - 1, reuse)
        self.seqs[slot] = _Seq(index, self.tokenizer.stream(), max_tokens)
        self.joining = slot
        return slot

    def prefill(self, rows: int = 1) -> BatchResponse | None:
        """Run the started prompt on by one piece (a chunk or a decode step), and more while they
        fit in `rows` rows of work: the response of its first token once it has joined, else None."""
        slot = self.joining
        try:
            joined = self.batch.advance(rows)
        except BaseException:  # the batch has freed the slot
            self._drop(slot)
            raise
        if joined is None:
            return None
        self.joining = None
        return self._emit(slot, joined[1])

    def next(self) -> list[BatchResponse]:
        """One batched step: a response per sequence."""
        return [self._emit(slot, tok) for slot, tok in self.batch.step().items()]

    def remove(self, index: int) -> None:
        """The sequence leaves (joined or still in its prompt): its slot is free."""
        for slot in [s for s, q in self.seqs.items() if q.index == index]:
            self._drop(slot)

    def close(self) -> None:
        """Every sequence leaves: the slots are free for the next user of the batch."""
        for slot in list(self.seqs):
            self._drop(slot)

    def _drop(self, slot: int) -> None:
        self.batch.leave(slot)
        del self.seqs[slot]
        if self.joining == slot:
            self.joining = None

    def _emit(self, slot: int, tok: int) -> BatchResponse:
        """The response for `tok` of the sequence in slot; a finished sequence leaves."""
        s = self.seqs[slot]
        s.generated += 1
        reason = "stop" if self.stop_at_eos and tok in self.tokenizer.eos_ids else None
        if reason is None and (s.generated >= s.max_tokens or self.batch.rows[slot].pos >= self.batch.ctx):
            reason = "length"
        text = "" if reason == "stop" else s.stream.add(tok)
        if reason is not None:
            text += s.stream.flush()
            self._drop(slot)
        return BatchResponse(s.index, text, tok, reason)


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
    gen = BatchGenerator(batch, tokenizer, kv, stop_at_eos)
    try:
        while waiting or gen.seqs:
            while waiting and gen.free:
                i = waiting.popleft()
                if limits[i] < 1:
                    yield BatchResponse(i, "", -1, "length")
                    continue
                yield gen.insert(i, prompts[i], limits[i], params[i], reuse)
            yield from gen.next()
    finally:  # a consumer that stops early: the slots are free for the next batch
        gen.close()


def collect_texts(responses, n: int) -> list:
    """The texts of n sequences' responses (stream_generate_batch), in the order of the prompts:
    each the raw text, carrying .reasoning and .content (reasoning.GeneratedText)."""
    from vkdecode.reasoning import GeneratedText

    texts, reasoning, content = [""] * n, [""] * n, [""] * n
    for r in responses:
        texts[r.index] += r.text
        reasoning[r.index] += r.reasoning
        content[r.index] += r.content
    return [GeneratedText.of(*parts) for parts in zip(texts, reasoning, content)]

"""Speculative decoding with prompt-lookup drafts, verified by one fixed-width replayed step.

Each verify step runs the chunk program of width K+1 with every row's logits and argmax
(fusion/chunk.py, tail "all"): rows are [current token, draft 1..K] at positions pos..pos+K, and
row i's argmax g_i is the greedy token after row i. Draft i+1 is accepted while it equals g_i;
the step emits g_0..g_n (n accepted drafts + the token that follows them), so greedy output is
the plain decode's token for token up to the rounding of another summation order, which matters
only where two logits are that close (seen once: SmolLM2, 24.7971 vs 24.7958, README). KV rows of rejected drafts (pos+n+1 ..
pos+K) stay in the cache but are never read: the next step starts at pos+n+1 and overwrites them,
and attention reads only rows up to each query's own position. Recurrent states (Qwen3.5) are not
rows: they are copied before each verify step and, where it did not accept every row, set back and
run through the accepted rows again (_rerun).

Drafts come from prompt lookup (no second model): the longest of the last 3, 2 tokens that
occurred earlier in the prompt or the generated text proposes the K tokens that followed its most
recent occurrence (continued periodically where it reaches the end of the text). No match: plain
decode steps run instead (one row is cheaper than K+1), in growing bursts while none is found.

A draft is only checked when checking pays (VerifyPolicy): a verify step costs what K+1 rows cost
on this device (on an H100 the per-op 9-row chunk step of SmolLM2 is ~4.5 plain fused steps), so
low acceptance (code edits on the H100: 2.2 tokens per verify, 0.75x plain) must fall back to plain
steps instead of losing to them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from vkdecode.errors import UsageError
from vkdecode.executors.base import TokenStats
from vkdecode.stats import Counters

MAX_NGRAM = 3
# A 1-token match drafts mostly wrong tokens: on SmolLM2's own outputs (code edit, summary, free
# chat, 64 tokens each) drafting only from 2- and 3-token matches kept 63 of 69 accepted tokens
# with 25 instead of 66 verify steps (simulated offline on the greedy outputs).
MIN_NGRAM = 2
# Plain steps run back to back (the decode executor's pipelined decode: the GPU feeds each step
# its token, the host reads them after) when the policy declines a draft, before drafts are looked
# up again. One step at a time waits for each token and drafts in between: on the H100, code edit
# with most drafts declined ran at 0.80x of plain decode.
DECLINE_BURST = 8
# Where no draft is found, the plain steps likewise: 1, 2, 4, .. up to NO_DRAFT_BURST back to back
# while none is found, one again after a draft (1: one waited-for step a token, as before). The real
# SmolLM2 on lavapipe, K=8, 64 tokens, one process: every draft checked code edit 0.80 -> 0.85x of
# plain decode, summarise 1.06 -> 1.08x, free chat 0.98 -> 1.07x; with the policy 0.84 -> 0.88x,
# 0.79 -> 0.96x, 0.96 -> 1.12x (bench/results/llvmpipe/2026-12-07-spec-bursts). Not yet measured on
# a GPU, where a waited-for step costs more against the step itself (bench.spec_replay models it).
NO_DRAFT_BURST = 8


class PromptLookup:
    """n-gram index over the text so far: n-gram -> where the tokens after its latest earlier
    occurrence start. Updated incrementally, so a lookup is O(MAX_NGRAM)."""

    def __init__(self, k: int, max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM):
        self.k, self.max_ngram, self.min_ngram = k, max_ngram, min_ngram
        self.tokens: list[int] = []
        self.after: dict[tuple, int] = {}

    def extend(self, toks) -> None:
        for t in toks:
            i = len(self.tokens)  # the n-grams ending just before token i now have a successor
            for n in range(1, self.max_ngram + 1):
                if i >= n:
                    self.after[tuple(self.tokens[i - n : i])] = i
            self.tokens.append(int(t))

    def draft(self) -> list[int]:
        for n in range(min(self.max_ngram, len(self.tokens)), self.min_ngram - 1, -1):
            start = self.after.get(tuple(self.tokens[-n:]))
            if start is not None:
                # a continuation that runs into the end of the text continues with itself: the
                # repetition it matched is periodic (a loop of one token drafts K copies)
                out: list[int] = []
                for j in range(start, start + self.k):
                    out.append(self.tokens[j] if j < len(self.tokens) else out[j - len(self.tokens)])
                return out
        return []


class VerifyPolicy:
    """Whether to check the next draft: running means of the wall time of a plain step and of a
    verify step and of the tokens a verify step emits; verify while tokens_per_verify * plain >=
    verify. Until both costs are known it verifies (to learn them); when it stops verifying it
    still tries a draft after PROBE_EVERY declined ones, or after as many as keep the probes under
    1 / PROBE_COST of the time, so a text turning repetitive is noticed: on lavapipe a 9-row
    verify step costs ~11 fused steps, and a probe every 16 steps cost summaries 0.7x of plain."""

    ALPHA = 0.25  # weight of the newest sample in a running mean
    PROBE_EVERY = 16
    PROBE_COST = 8

    def __init__(self, always: bool = False):
        self.always = always
        self.plain_s: float | None = None
        self.verify_s: float | None = None
        self.tokens: float | None = None
        self.declined = 0

    def _mean(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.ALPHA * (new - old)

    def note_plain(self, seconds: float) -> None:
        self.plain_s = self._mean(self.plain_s, seconds)

    def note_verify(self, seconds: float, emitted: int) -> None:
        self.verify_s = self._mean(self.verify_s, seconds)
        self.tokens = self._mean(self.tokens, float(emitted))

    def skip(self, steps: int) -> None:
        """A declined draft's burst ran `steps` more plain steps without looking: they count toward
        the probe spacing as declined drafts would."""
        self.declined += steps

    def pays(self) -> bool:
        if self.always or self.plain_s is None or self.verify_s is None or self.tokens is None:
            return True
        if self.tokens * self.plain_s >= self.verify_s:
            self.declined = 0
            return True
        self.declined += 1
        if self.declined >= max(self.PROBE_EVERY, self.PROBE_COST * self.verify_s / self.plain_s):
            self.declined = 0
            return True
        return False


@dataclass
class SpecStats:
    verify_steps: int = 0
    plain_steps: int = 0  # no draft found, or checking it did not pay: the decode step ran
    declined: int = 0  # drafts found but not checked (VerifyPolicy): each a burst of plain steps
    drafted: int = 0  # draft tokens checked (padding excluded)
    accepted: int = 0
    emitted: int = 0

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        d["acceptance_rate"] = self.accepted / self.drafted if self.drafted else 0.0
        d["tokens_per_verify"] = (
            (self.emitted - self.plain_steps) / self.verify_steps if self.verify_steps else 0.0
        )
        return d


class Speculative:
    """The verify executor of one decode executor (sharing its weights, caches, step buffer)."""

    def __init__(self, decode_ex, k: int, always_verify: bool = False, prefill=None, no_draft_burst: int = 0):
        from fusion.chunk import chunk_program, has_recurrent_state
        from vkdecode.executors.prefill import chunk_executor
        from vkdecode.executors.state_checkpoint import StateCheckpoint

        if k < 1:
            raise UsageError(f"--speculative takes K >= 1 draft tokens, not {k}")
        if decode_ex.samples:
            raise UsageError("speculative decoding is greedy only: load without sampling (temp 0)")
        self.decode_ex, self.k, self.prefill = decode_ex, k, prefill
        # recurrent states (Qwen3.5): a verify step's rejected rows stay in them, so they are copied
        # before each verify step and set back after one that did not accept every row (_verify)
        self.states = StateCheckpoint(decode_ex) if has_recurrent_state(decode_ex.program) else None
        if self.states is not None:
            self.states.reserve()  # here, or a verify step could not be undone
        # the widest prompt chunk's activations (prefill: executors.prefill.Prefill) are big enough
        share = [decode_ex.plan] + (
            [next(iter(prefill.runners.values())).plan] if prefill is not None and prefill.runners else []
        )
        prog = chunk_program(decode_ex.program, k + 1, "all")
        self.verify = chunk_executor(decode_ex.mode, decode_ex.device, prog, decode_ex.caps, share)
        self.stats = SpecStats()
        self.policy = VerifyPolicy(always=always_verify)
        self.no_draft_burst = max(1, no_draft_burst or NO_DRAFT_BURST)

    def run(self, history: list[int], token: int, pos: int, max_steps: int):
        """Yields up to max_steps tokens after `token` (at `pos`), like Executor.decode; history is
        the prompt (token excluded)."""
        ex, v, k = self.decode_ex, self.verify, self.k
        look = PromptLookup(k)
        look.extend(history)
        look.extend([token])
        ids = v.plan.slices[("chunk_tokens", "data")]
        out = v.plan.slices[("next_token", "data")]
        left = min(max_steps, ex.ctx - pos)
        burst = 1  # plain steps the next draftless turn runs back to back
        while left > 0:
            drafts = look.draft() if pos + k < ex.ctx else []
            t0 = time.perf_counter()
            if not drafts:  # draftless turns: 1, 2, 4, .. plain steps
                n, burst = burst, min(2 * burst, self.no_draft_burst)
            else:  # a draft checked (0), or declined: a burst of plain steps
                n = 0 if self.policy.pays() else DECLINE_BURST
                burst = 1 if n == 0 else burst
            if n > 1:
                emitted = list(ex.decode(token, pos, min(left, n)))  # a TokenStats each
                self.stats.plain_steps += len(emitted)
                if drafts:
                    self.stats.declined += 1
                    self.policy.skip(len(emitted) - 1)
                self.policy.note_plain((time.perf_counter() - t0) / len(emitted))
            else:
                if n == 1:
                    emitted = [ex.step(token, pos)]
                    self.stats.plain_steps += 1
                    self.policy.note_plain(time.perf_counter() - t0)
                else:
                    emitted = self._verify(drafts, token, pos, ids, out)
                    self.policy.note_verify(time.perf_counter() - t0, len(emitted))
                    ex.token_stats.append(v.token_stats.pop())
                # one TokenStats per emitted token (the step's counters on the first), so the run
                # summary's tok/s and per-token figures stay per token
                wall = (time.perf_counter() - t0) * 1e6 / len(emitted)
                emitted = emitted[:left]
                first = ex.token_stats[-1]
                first.wall_us = wall
                ex.token_stats.extend(TokenStats(Counters(), 0.0, first.gpu_us, wall) for _ in emitted[1:])
            self.stats.emitted += len(emitted)
            look.extend(emitted)
            pos += len(emitted)
            left -= len(emitted)
            token = emitted[-1]
            yield from emitted

    def _verify(self, drafts: list[int], token: int, pos: int, ids, out) -> list[int]:
        """One verify step of [token, drafts, padding]: the greedy tokens it emits (the accepted
        drafts' and the one after them)."""
        k = self.k
        self.stats.verify_steps += 1
        self.stats.drafted += len(drafts)
        rows = [token] + drafts + [drafts[-1]] * (k - len(drafts))  # padding: never accepted
        ids.buffer.write_u32(ids.offset // 4, rows)
        if self.states is not None:
            self.states.save([])  # the states before `token`
        self.verify.step(token, pos)
        g = [int(x) for x in out.read_array("uint32", k + 1)]
        n = 0
        while n < len(drafts) and drafts[n] == g[n]:
            n += 1
        self.stats.accepted += n
        if self.states is not None and n < k:  # rows past the accepted ones went into the states
            self._rerun(rows[: n + 1], pos)
        return g[: n + 1]

    def _rerun(self, rows: list[int], pos: int) -> None:
        """The recurrent states set back to before the verify step, then through its accepted rows
        again: prompt chunks where the prompt's plan takes them, else decode steps (their KV rows
        rewritten with the same values, their tokens dropped). The policy times the verify step
        with this, so where it does not pay drafts are declined."""
        ex, pre = self.decode_ex, self.prefill
        kept, chunks = len(ex.token_stats), len(pre.chunks) if pre is not None else 0
        self.states.restore()
        done = pre.run(rows, pos) if pre is not None else 0
        for i in range(done, len(rows)):
            ex.step(rows[i], pos + i)
        del ex.token_stats[kept:]  # the run's stats count emitted tokens and prompt chunks only
        if pre is not None:
            del pre.chunks[chunks:]

    def close(self) -> None:
        if self.states is not None:
            self.states.close()
        self.verify.close()

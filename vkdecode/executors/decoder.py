"""Decoder: the decode-step executor composed with its optional parts, the prompt chunks
(prefill.py) and the speculative verify step (speculative.py). Each part shares the step's
weights, KV caches and step buffer; the step executor knows nothing of them.

    dec.run_prompt(tokens, pos0) -> next token (chunks, then the last token through the step)
    dec.prompt_pieces(tokens, pos0) -> the same work, one chunk or step per piece
    dec.decode(token, pos, n, history) -> generator of the next n tokens (verify steps or plain)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

from vkdecode.errors import ContextError


class PromptPiece(NamedTuple):
    """One piece of a prompt's work (Decoder.prompt_pieces)."""

    rows: int  # rows of work: a chunk's width, 1 for a decode step
    run: Callable[[], int]  # runs it; the prompt's last piece returns the next token


class Decoder:
    def __init__(self, executor, prefill=None, speculative=None):
        self.executor = executor
        self.prefill = prefill  # executors.prefill.Prefill or None
        self.speculative = speculative  # executors.speculative.Speculative or None

    @classmethod
    def build(cls, device, program, weights, options, progress=None) -> Decoder:
        from vkdecode.executors import make_executor

        ex = make_executor(
            options.mode,
            device,
            program,
            weights,
            caps=options.caps,
            progress=progress,
            rules=options.rules,
            profile=options.profile,
            tokens_per_submit=options.tokens_per_submit,
            share=options.share,
        )
        dec = cls(ex)
        try:
            if options.prefill:
                dec.set_prefill(options.prefill_widths)
            if options.speculative:
                dec.set_speculative(options.speculative, options.always_verify)
        except BaseException:
            dec.close()
            raise
        return dec

    def set_prefill(self, widths=None) -> None:
        """(Re)build the prompt chunks: one executor per width (None: the device's widths), each
        recorded once in replay modes."""
        from vkdecode.executors.prefill import Prefill

        if self.prefill is not None:
            self.prefill.close()
            self.prefill = None
        self.prefill = Prefill(self.executor, widths)

    def set_speculative(self, k: int, always_verify: bool = False, no_draft_burst: int = 0) -> None:
        """(Re)build the verify step of K drafts. always_verify checks every draft found, paying or
        not (tests; bench/speculative.py's acceptance figures); no_draft_burst: plain steps run
        back to back at most where no draft is found (0: speculative.NO_DRAFT_BURST)."""
        from vkdecode.executors.speculative import Speculative

        if self.speculative is not None:
            self.speculative.close()
            self.speculative = None
        self.speculative = Speculative(self.executor, k, always_verify, self.prefill, no_draft_burst)

    @property
    def ctx(self) -> int:
        return self.executor.ctx

    @property
    def mode(self) -> str:
        return self.executor.mode

    def run_prompt(self, tokens, pos0: int = 0, should_stop=None, wrote=None) -> int | None:
        """Run prompt tokens at positions pos0.. and return the next token: all but the last in
        chunks (when there are prompt chunks), the last through the decode step. should_stop() is
        checked before each chunk and step; True returns None at once (rows written stay written).
        wrote(token, pos) is called for every KV row known written (prompt_cache.KVPrefix.wrote)."""
        nxt = -1
        for piece in self.prompt_pieces(tokens, pos0, wrote):
            if should_stop is not None and should_stop():
                return None
            nxt = piece.run()
        return nxt

    def prompt_pieces(self, tokens, pos0: int = 0, wrote=None) -> list[PromptPiece]:
        """run_prompt's work as pieces to run in order, each one chunk or one decode step; the last
        piece's run() returns the next token. Between two pieces the caller may run other steps
        (a batch's: executors/batch.py) as long as they leave this decoder's KV cache and step
        buffer alone."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise ContextError("the prompt is empty: nothing to decode from")
        if pos0 + len(tokens) > self.ctx:
            raise ContextError(
                f"{len(tokens)} prompt tokens from position {pos0} do not fit the context of {self.ctx}"
            )
        pieces, done = [], 0
        if self.prefill is not None:
            for w, n in self.prefill.plan(len(tokens) - 1, pos0):
                chunk = functools.partial(self._chunk, w, tokens[done : done + n], pos0 + done, wrote)
                pieces.append(PromptPiece(w, chunk))
                done += n
        for i in range(done, len(tokens)):
            pieces.append(PromptPiece(1, functools.partial(self._prompt_step, tokens[i], pos0 + i, wrote)))
        return pieces

    def _chunk(self, w: int, tokens: list[int], pos: int, wrote) -> int:
        self.prefill.run_chunk(w, tokens, pos)
        if wrote is not None:
            for i, t in enumerate(tokens):
                wrote(t, pos + i)
        return -1

    def _prompt_step(self, token: int, pos: int, wrote) -> int:
        nxt = self.executor.step(token, pos)
        if wrote is not None:
            wrote(token, pos)
        return nxt

    def decode(self, token: int, pos: int, max_steps: int, history=()):
        """The tokens after `token` (at `pos`), up to max_steps; history (the prompt) feeds the
        speculative drafts. close() the generator to stop."""
        if self.speculative is not None:  # greedy only (Speculative refuses a sampling program)
            return self.speculative.run(list(history), token, pos, max_steps)
        return self.executor.decode(token, pos, max_steps)

    def clear_stats(self) -> None:
        """One generation's stats only: kept across generations they grow without bound."""
        self.executor.token_stats.clear()
        if self.prefill is not None:
            self.prefill.chunks.clear()

    def close(self) -> None:
        # the parts use the step's slices: close them first
        for part in ("speculative", "prefill", "executor"):
            obj = getattr(self, part, None)
            if obj is not None:
                obj.close()
                setattr(self, part, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

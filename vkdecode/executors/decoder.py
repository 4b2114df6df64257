"""Decoder: the decode-step executor composed with its optional parts, the prompt chunks
(prefill.py) and the speculative verify step (speculative.py). Each part shares the step's
weights, KV caches and step buffer; the step executor knows nothing of them.

    dec.run_prompt(tokens, pos0) -> next token (chunks, then the last token through the step)
    dec.decode(token, pos, n, history) -> generator of the next n tokens (verify steps or plain)
"""

from __future__ import annotations

from vkdecode.errors import ContextError


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

    def set_speculative(self, k: int, always_verify: bool = False) -> None:
        """(Re)build the verify step of K drafts. always_verify checks every draft found, paying or
        not (tests; bench/speculative.py's acceptance figures)."""
        from vkdecode.executors.speculative import Speculative

        if self.speculative is not None:
            self.speculative.close()
            self.speculative = None
        self.speculative = Speculative(self.executor, k, always_verify, self.prefill)

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
        tokens = list(tokens)
        if not tokens:
            raise ContextError("the prompt is empty: nothing to decode from")
        ex = self.executor
        if pos0 + len(tokens) > ex.ctx:
            raise ContextError(
                f"{len(tokens)} prompt tokens from position {pos0} do not fit the context of {ex.ctx}"
            )
        done = 0
        if self.prefill is not None:
            done = self.prefill.run(tokens[:-1], pos0, should_stop)
            if done is None:
                return None
        if wrote is not None:
            for i in range(done):
                wrote(tokens[i], pos0 + i)
        nxt = -1
        for i in range(done, len(tokens)):
            if should_stop is not None and should_stop():
                return None
            nxt = ex.step(tokens[i], pos0 + i)
            if wrote is not None:
                wrote(tokens[i], pos0 + i)
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

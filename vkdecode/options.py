"""DecodeOptions: every setting of how a model decodes, validated once, in one place.

The CLI, `vkdecode.load`, the server and the benchmarks build one and hand it down unchanged to
`executors.build_decoder`; an invalid combination is refused here, naming the setting the way the
API and the CLI spell it, before anything is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from vkdecode.errors import UsageError

MODES = ("fused", "replay-nofuse", "unfused")
KV_DTYPES = ("f16", "f32")
# steps one submit may carry: two submits in flight stay within the GPU's token ring (executors/plan.py)
MAX_TOKENS_PER_SUBMIT = 32


@dataclass(frozen=True)
class DecodeOptions:
    mode: str = "fused"  # MODES: fused regions replayed, per-op replay, or per-op re-recorded
    ctx: int | None = None  # KV rows (None: min(4096, the model's maximum), as the CLI's --ctx)
    kv_dtype: str = "f16"  # KV cache element type (KV_DTYPES; the loader refuses others)
    sampling: bool = False  # end the step in the GPU sampler (else argmax): needed for temp > 0
    tokens_per_submit: int = 1  # fused mode: K recorded steps per submit and readback
    prefill: bool | tuple[int, ...] = True  # prompt chunk widths (True: the device's, False: none)
    speculative: int = 0  # greedy: K prompt-lookup drafts per verify step (0: off)
    always_verify: bool = False  # verify every draft found, paying or not (tests, benchmarks)
    profile: bool = False  # a timestamp after every region (vkdecode stats, bench)
    caps: object = None  # lowering.caps.KernelCaps to use instead of the device's
    rules: tuple | None = None  # fusion rules (names or Rule objects; None: all)
    share: tuple = field(default=(), repr=False)  # executors.plan: slices to share with another step

    def __post_init__(self):
        if isinstance(self.prefill, (list, tuple)):
            object.__setattr__(self, "prefill", tuple(self.prefill))
        if self.rules is not None:
            object.__setattr__(self, "rules", tuple(self.rules))
        problem = self.problem()
        if problem:
            raise UsageError(problem)

    def problem(self) -> str | None:
        """What is wrong with these options, or None."""
        if self.mode not in MODES:
            return f"unknown mode {self.mode!r} (choose from {', '.join(MODES)})"
        if self.ctx is not None and (not isinstance(self.ctx, int) or self.ctx < 2):
            return f"ctx (--ctx) must be at least 2, not {self.ctx!r}"
        k = self.tokens_per_submit
        if not isinstance(k, int) or not 1 <= k <= MAX_TOKENS_PER_SUBMIT:
            return f"tokens_per_submit (--tokens-per-submit) must be 1..{MAX_TOKENS_PER_SUBMIT}, not {k!r}"
        if k != 1 and self.mode != "fused":
            return "tokens_per_submit (--tokens-per-submit) is a fused-mode option"
        if isinstance(self.prefill, tuple) and not all(isinstance(w, int) and w >= 1 for w in self.prefill):
            return f"prefill (--prefill) takes positive chunk widths, not {self.prefill!r}"
        if not isinstance(self.speculative, int) or self.speculative < 0:
            return (
                f"speculative (--speculative) takes K >= 1 draft tokens (0 = off), not {self.speculative!r}"
            )
        if self.speculative and self.sampling:
            return "speculative (--speculative) is greedy only: load without sampling (drop --temp)"
        if self.speculative and k != 1:
            return "speculative (--speculative) and tokens_per_submit (--tokens-per-submit) do not combine"
        return None

    @classmethod
    def from_kwargs(cls, **kw) -> DecodeOptions:
        """Options from keyword arguments, refusing unknown ones by name (vkdecode.load's **kw)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kw) - known)
        if unknown:
            raise UsageError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**kw)

    @property
    def prefill_widths(self) -> tuple[int, ...] | None:
        """None: the device's default widths; () : no prompt chunks."""
        if self.prefill is True:
            return None
        return tuple(self.prefill) if self.prefill else ()


def check_text(what: str, text: str | None) -> None:
    """A prompt or message that is not UTF-8 text is refused before anything loads: bytes that are
    not UTF-8 reach Python from argv as lone surrogates (surrogateescape), which no tokenizer can
    encode. what: the option as the caller spelled it (--prompt, chat, ...)."""
    if text is None:
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        try:
            raw = f"byte(s) {text[e.start : e.end].encode('utf-8', 'surrogateescape').hex(' ')}"
        except UnicodeEncodeError:
            raw = f"lone surrogate {text[e.start]!r}"
        raise UsageError(
            f"{what} is not valid UTF-8 text ({raw} at character {e.start}); give the text in UTF-8"
        ) from None

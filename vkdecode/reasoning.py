"""Reasoning split from the answer, as text streams: a parser is fed the text deltas of a generation
(GenerationResponse.text) and returns (channel, text) pieces, channel REASONING or CONTENT.

Two formats. "harmony" (gpt-oss): messages `<|start|>ROLE<|channel|>NAME ...<|message|>BODY<|end|>`;
the final channel's bodies are the content, every other channel's (analysis; commentary, where
preambles and tool-call arguments go) reasoning; the header between `<|start|>` and `<|message|>`
is dropped. "think" (Qwen3, DeepSeek-R1): a leading `<think>...</think>` block is the reasoning,
the rest the content; when the prompt already ends with `<think>` the output starts inside it.

Nothing is held back but a possible partial marker at the end of what came (a marker's text may
arrive in pieces), and a harmony header, at most HEADER_LIMIT characters: a longer one, or one the
output ends in without `<|message|>`, is not harmony and comes out as content.
"""

from __future__ import annotations

REASONING, CONTENT = "reasoning", "content"
FORMATS = ("harmony", "think")
# what --reasoning-format / reasoning_format= take: a format, "auto" (the model's) or "none" (raw)
CHOICES = ("auto", "none", *FORMATS)
HEADER_LIMIT = 160  # a header with a tool recipient and <|constrain|>json is ~80 characters
PROMPT_TAIL_TOKENS = 32  # the prompt's last tokens the parser starts from (its open block, if any)


def detect(arch: str | None, tokenizer) -> str | None:
    """The reasoning format of a model: harmony for gpt-oss (or a harmony chat template), think
    where the chat template or the vocabulary has <think>, else None."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if arch == "gpt-oss" or "<|channel|>" in template:
        return "harmony"
    hf = getattr(tokenizer, "tok", None)
    vocab = hf is not None and None not in (hf.token_to_id("<think>"), hf.token_to_id("</think>"))
    if "<think>" in template or vocab:
        return "think"
    return None


def resolve(choice: str | None, detected: str | None) -> str | None:
    """--reasoning-format's value -> the format to parse with (None: the raw text)."""
    if choice in (None, "none"):
        return None
    if choice == "auto":
        return detected
    if choice not in FORMATS:
        raise ValueError(f"reasoning format {choice!r} is not one of {', '.join(CHOICES)}")
    return choice


def make_parser(fmt: str | None, prompt_tail: str = ""):
    """A fresh parser for one generation (None for fmt None); prompt_tail: the end of the prompt
    text, which says whether the output starts inside a block the template opened."""
    if fmt is None:
        return None
    return {"harmony": HarmonyParser, "think": ThinkParser}[fmt](prompt_tail)


def feed_token(parser, text: str, finished: bool) -> list[tuple[str, str]]:
    """One token's (channel, text) pieces; the last token's (finished) also carry what was held."""
    return parser.feed(text) + (parser.flush() if finished else [])


def _split(r, parser):
    pieces = feed_token(parser, r.text, r.finish_reason is not None)
    r.reasoning = "".join(t for c, t in pieces if c == REASONING)
    r.content = "".join(t for c, t in pieces if c == CONTENT)
    return r


def split_responses(responses, parser):
    """GenerationResponses with .reasoning and .content set from parser; the last one (its
    finish_reason set) also carries what the parser held."""
    return (_split(r, parser) for r in responses)


def split_batch_responses(responses, parsers: list):
    """split_responses for a batch: each response through the parser of its sequence (parsers[r.index])."""
    return (_split(r, parsers[r.index]) for r in responses)


class _Parser:
    """Splits the text at the current state's markers (a subclass's _markers()), holding back a
    tail that could begin one; the subclass says what text and markers mean (_text, _marker)."""

    def __init__(self):
        self.held = ""
        self.out: list[list[str]] = []

    def feed(self, text: str) -> list[tuple[str, str]]:
        buf = self.held + text
        while buf:
            hit = min(((buf.find(m), -len(m), m) for m in self._markers() if m in buf), default=None)
            if hit is None:
                keep = _partial(buf, self._markers())
                self._text(buf[: len(buf) - keep])
                buf = buf[len(buf) - keep :]
                break
            i, _, m = hit
            self._text(buf[:i])
            buf = buf[i:]
            if m in self._markers():  # else the text before it changed the state: scan again
                self._marker(m)
                buf = buf[len(m) :]
        self.held = buf
        return self._take()

    def flush(self) -> list[tuple[str, str]]:
        """The end of the output: what was held comes out as text."""
        held, self.held = self.held, ""
        self._text(held)
        self._end()
        return self._take()

    def _emit(self, channel: str, text: str) -> None:
        if not text:
            return
        if self.out and self.out[-1][0] == channel:
            self.out[-1][1] += text
        else:
            self.out.append([channel, text])

    def _take(self) -> list[tuple[str, str]]:
        out, self.out = [(c, t) for c, t in self.out], []
        return out

    def _end(self) -> None:
        pass


def _partial(buf: str, markers) -> int:
    """Length of the longest tail of buf that is a proper prefix of a marker."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(buf)), best, -1):
            if buf.endswith(m[:k]):
                best = k
                break
    return best


class ThinkParser(_Parser):
    """<think>reasoning</think>content, the block only at the start of the output. The whitespace
    templates and models put after <think> and </think> is dropped (llama.cpp trims it too)."""

    OPEN, CLOSE = "<think>", "</think>"

    def __init__(self, prompt_tail: str = ""):
        super().__init__()
        opened = prompt_tail.rstrip().endswith(self.OPEN)
        self.state = REASONING if opened else "start"
        self.strip = True  # drop the whitespace at the start of the next part

    def _markers(self):
        return {"start": (self.OPEN,), REASONING: (self.CLOSE,)}.get(self.state, ())

    def _text(self, text: str) -> None:
        if self.strip:
            text = text.lstrip()
            self.strip = not text
        if text and self.state == "start":  # no think block: all of it is the answer
            self.state = CONTENT
        self._emit(self.state, text)

    def _marker(self, marker: str) -> None:
        self.state = REASONING if marker == self.OPEN else CONTENT
        self.strip = True


class HarmonyParser(_Parser):
    """OpenAI's harmony messages. The prompt's tail from its last <|start|> is parsed first, so a
    template that ends in `<|start|>assistant` (gpt-oss's) leaves the parser in that header."""

    START, CHANNEL, MESSAGE, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|constrain|>"
    ENDS = ("<|end|>", "<|return|>", "<|call|>")
    HEADER_MARKERS = (START, CHANNEL, MESSAGE, CONSTRAIN, *ENDS)
    BODY_MARKERS = (START, CHANNEL, *ENDS)  # a body ends at <|end|>, or where a new message begins

    def __init__(self, prompt_tail: str = ""):
        super().__init__()
        self.body: str | None = None  # the channel of the message being read; None in a header
        self._new_header()
        at = prompt_tail.rfind(self.START)
        if at >= 0:
            self.feed(prompt_tail[at:])
        self.held, self.out = "", []
        self.primed, self.opened = len(self.header), False  # the prompt's part is never output

    def _markers(self):
        return self.HEADER_MARKERS if self.body is None else self.BODY_MARKERS

    def _text(self, text: str) -> None:
        if self.body is not None:
            self._emit(self.body, text)
            return
        self.header += text
        if len(self.header) - self.primed > HEADER_LIMIT:
            self._not_a_header()

    def _marker(self, marker: str) -> None:
        if self.body is not None:  # the body ends
            self.body = None
            self._new_header(marker if marker == self.CHANNEL else "", marker == self.START)
        elif marker == self.START or marker in self.ENDS:
            self._new_header("", marker == self.START)
        elif marker == self.MESSAGE:
            self.body = self._channel(self.header)
            self._new_header()
        else:
            self._text(marker)

    def _new_header(self, text: str = "", opened: bool = False) -> None:
        """opened: the header follows a <|start|> of the output (so it is one, however it ends)."""
        self.header, self.primed, self.opened = text, 0, opened

    def _channel(self, header: str) -> str:
        """final -> the answer; analysis, commentary (preambles, tool calls) and the rest reasoning."""
        _, _, after = header.partition(self.CHANNEL)
        name = after.replace(self.CONSTRAIN, " ").split()
        return CONTENT if name and name[0] == "final" else REASONING

    def _not_a_header(self) -> None:
        """Output that does not follow harmony: what it wrote of the header is content, as is
        what follows until the next message."""
        self._emit(CONTENT, self.header[self.primed :])
        self.body = CONTENT
        self._new_header()

    def _end(self) -> None:
        if self.body is None and not self.opened and self.CHANNEL not in self.header:
            self._emit(CONTENT, self.header[self.primed :])  # text where a header should have begun
        self._new_header()


class GeneratedText(str):
    """Model.generate's (and generate_batch's) raw text, a str, carrying the split too: .reasoning and .content."""

    reasoning: str = ""
    content: str = ""

    @classmethod
    def of(cls, text: str, reasoning: str, content: str) -> GeneratedText:
        out = cls(text)
        out.reasoning, out.content = reasoning, content
        return out

"""`vkdecode serve`: the OpenAI request bodies, checked field by field into a GenRequest, and the
OpenAI error shape. A setting that would change the output and is not implemented (penalties,
logprobs, n > 1, tools) is refused with a 400 rather than ignored: a wrong answer is worse."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vkdecode.errors import ModelError

MAX_STOPS = 16
PROMPT_TAIL_CHARS = 256  # of a chat's prompt text, for its reasoning parser (an opened block)
# fields a client may send that change nothing when they hold these values
NEUTRAL = {
    "n": (1, None),
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "logprobs": (False, None, 0),
    "top_logprobs": (None, 0),
    "logit_bias": (None,),
    "best_of": (1, None),
    "echo": (False, None),
    "suffix": (None, ""),
    "tools": (None,),
    "functions": (None,),
    "tool_choice": (None, "none", "auto"),
}
ROLES = {"system", "user", "assistant", "developer"}


class ApiError(Exception):
    """An error answered as {"error": {"message", "type", "param", "code"}} with an HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        kind: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.kind = kind or ("server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class GenRequest:
    kind: str  # "chat" or "completion"
    prompt_ids: list[int]
    max_tokens: int
    temp: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    cache_prompt: bool = True
    # chat: the reasoning format its output is split by (vkdecode/reasoning.py; None: raw text in
    # content), and the end of its prompt text, where the template may have opened a block
    reasoning: str | None = None
    prompt_tail: str = ""


def bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param, code)


def _number(
    body: dict,
    key: str,
    default,
    lo: float,
    hi: float | None = None,
    lo_open: bool = False,
    integer: bool = False,
):
    v = body.get(key)
    if v is None:
        return default
    want = "an integer" if integer else "a number"
    if (
        isinstance(v, bool)
        or not isinstance(v, int if integer else (int, float))
        or (isinstance(v, float) and not math.isfinite(v))
    ):
        raise bad(f"'{key}' must be {want}, not {type(v).__name__} {v!r}", key)
    if v < lo or (lo_open and v == lo) or (hi is not None and v > hi):
        rng = f"{'>' if lo_open else '>='} {lo}" + (f" and <= {hi}" if hi is not None else "")
        raise bad(f"'{key}' must be {rng}, got {v!r}", key)
    return v


def _refuse_unsupported(body: dict) -> None:
    for key, neutral in NEUTRAL.items():
        v = body.get(key)
        if v in neutral or v == {} or v == []:
            continue
        raise bad(
            f"'{key}' = {v!r} is not supported by vkdecode serve (it would change the output); leave it out",
            key,
            "unsupported_parameter",
        )
    rf = body.get("response_format")
    if rf is not None and rf != {"type": "text"}:
        raise bad(
            "'response_format' other than {'type': 'text'} is not supported",
            "response_format",
            "unsupported_parameter",
        )


def _stops(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    stops = [v] if isinstance(v, str) else v
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise bad("'stop' must be a string or a list of strings", "stop")
    if len(stops) > MAX_STOPS:
        raise bad(f"'stop' holds {len(stops)} strings; at most {MAX_STOPS}", "stop")
    if any(s == "" for s in stops):
        raise bad("'stop' strings must not be empty", "stop")
    return stops


def check_model(body: dict, model_id: str) -> None:
    name = body.get("model")
    if name is None:
        return  # one model is served: no name means that one
    if not isinstance(name, str):
        raise bad(f"'model' must be a string, not {type(name).__name__}", "model")
    if name != model_id:
        raise ApiError(
            404,
            f"the model {name!r} does not exist; this server serves {model_id!r} (GET /v1/models)",
            "model",
            "model_not_found",
        )


def _common(
    body: dict, kind: str, prompt_ids: list[int], ctx: int, max_key_value, default_max: int, random_seed
) -> GenRequest:
    _refuse_unsupported(body)
    if not prompt_ids:
        raise bad(
            "the prompt is empty: nothing to decode from", "prompt" if kind == "completion" else "messages"
        )
    if len(prompt_ids) >= ctx:
        raise bad(
            f"the prompt has {len(prompt_ids)} tokens but the context holds {ctx} (one position "
            f"must stay free for the first new token); shorten it or restart the server with a "
            f"larger --ctx",
            "messages" if kind == "chat" else "prompt",
            "context_length_exceeded",
        )
    key, value = max_key_value
    if value is None:
        max_tokens = default_max
    else:
        max_tokens = _number({key: value}, key, None, 1, integer=True)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("'stream' must be true or false", "stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool):
        raise bad("'stream_options' must be an object like {\"include_usage\": true}", "stream_options")
    cache = body.get("cache_prompt", True)
    if not isinstance(cache, bool):
        raise bad("'cache_prompt' must be true or false", "cache_prompt")
    seed = _number(body, "seed", None, -(1 << 63), (1 << 64) - 1, integer=True)
    return GenRequest(
        kind=kind,
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        temp=float(_number(body, "temperature", 1.0, 0.0)),
        top_p=float(_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)),
        top_k=_number(body, "top_k", 0, 0, (1 << 32) - 1, integer=True),  # a uint32 in the step buffer
        seed=random_seed() if seed is None else seed,
        stop=_stops(body),
        stream=stream,
        include_usage=bool(opts.get("include_usage", False)),
        cache_prompt=cache,
    )


def _message(i: int, m) -> dict:
    """A message as the template gets it. An assistant turn sent back with the reasoning_content
    this server gave it passes it on as `reasoning_content` (Qwen3's templates) and `thinking`
    (gpt-oss's); templates that use neither ignore it."""
    role, content = _message_text(i, m)
    out = {"role": role, "content": content}
    r = m.get("reasoning_content")
    if r is not None and role == "assistant":
        if not isinstance(r, str):
            raise bad(f"messages[{i}].reasoning_content must be a string", f"messages[{i}].reasoning_content")
        out["reasoning_content"] = out["thinking"] = r
    return out


def _message_text(i: int, m) -> tuple[str, str]:
    if not isinstance(m, dict):
        raise bad(f"messages[{i}] must be an object with 'role' and 'content'", f"messages[{i}]")
    role, content = m.get("role"), m.get("content")
    if not isinstance(role, str) or role not in ROLES:
        raise bad(
            f"messages[{i}].role {role!r} is not supported (use one of {sorted(ROLES)})",
            f"messages[{i}].role",
        )
    if isinstance(content, list):  # content parts: only text is understood
        parts = []
        for p in content:
            if not isinstance(p, dict) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                raise bad(
                    f"messages[{i}].content: only text parts ({{'type': 'text', 'text': ...}}) are supported",
                    f"messages[{i}].content",
                )
            parts.append(p["text"])
        content = "".join(parts)
    if not isinstance(content, str):
        raise bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")
    return ("system" if role == "developer" else role), content


def parse_chat(
    body: dict, tok, ctx: int, model_id: str, random_seed, reasoning: str | None = None
) -> GenRequest:
    """tok: the model's Tokenizer; ctx: the context length; reasoning: the format the answer's
    reasoning is split by (the server's --reasoning-format, resolved), None for the raw text."""
    check_model(body, model_id)
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise bad("'messages' must be a non-empty list of {'role', 'content'} objects", "messages")
    messages = [_message(i, m) for i, m in enumerate(msgs)]
    try:
        text = tok.apply_chat_template(messages, add_generation_prompt=True)
        ids = tok.encode(text)
    except ModelError as e:  # the model's template refuses these messages (raise_exception)
        raise bad(str(e), "messages") from None
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    req = _common(body, "chat", ids, ctx, (key, body.get(key)), ctx, random_seed)
    req.reasoning, req.prompt_tail = reasoning, text[-PROMPT_TAIL_CHARS:] if reasoning else ""
    return req


def parse_completion(body: dict, tok, ctx: int, model_id: str, random_seed) -> GenRequest:
    check_model(body, model_id)
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        ids = tok.encode_prompt(p)
    elif isinstance(p, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        vocab = tok.vocab_size
        if any(not 0 <= t < vocab for t in p):
            raise bad(f"'prompt' token ids must be in 0..{vocab - 1}", "prompt")
        ids = list(p)
    else:
        raise bad(
            "'prompt' must be a string, a list of token ids, or a list holding one of them "
            "(one prompt per request)",
            "prompt",
        )
    # OpenAI's legacy completions default to 16 new tokens
    return _common(body, "completion", ids, ctx, ("max_tokens", body.get("max_tokens")), 16, random_seed)


class StopScanner:
    """Cuts generated text at the first stop string; holds back a tail that could start one, so no
    part of a stop string is ever sent. Where the reasoning is split from the answer, only the
    answer is scanned: a stop string ends the answer, and reasoning that quotes it ends nothing."""

    def __init__(self, stops: list[str]):
        self.stops, self.held = stops, ""

    def feed(self, text: str) -> tuple[str, bool]:
        """-> (text safe to send, whether a stop string was found)."""
        if not self.stops:
            return text, False
        buf = self.held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return buf[: min(hits)], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out

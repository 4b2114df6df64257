"""`vkdecode serve`: what is refused before a request body is parsed into a GenRequest.

A web page open in the user's browser can send a "simple" POST (Content-Type text/plain, no CORS
preflight) to 127.0.0.1: it cannot read the answer, but it spends the device. So bodies must be
`application/json` (415 otherwise), and a request whose Origin header names a page not listed by
--allow-origin is refused (403); clients that are not browsers send no Origin and pass. Then the
body: its size (413), JSON that is malformed, nested deeper than MAX_DEPTH, or holding a lone
UTF-16 surrogate (400, naming the field), and the API key (401).
"""

from __future__ import annotations

import hmac
import json
import re

from starlette.responses import JSONResponse

from vkdecode.serve.requests import ApiError, bad

DRAIN_LIMIT = 64 << 20  # an oversized body is read (and dropped) up to this, so the 413 arrives
MAX_DEPTH = 32  # levels of nested objects / lists in a body; OpenAI's bodies need 5
# JSON tokens that matter for nesting: a key (a string followed by ':'), another string, a bracket
_JSON_TOKENS = re.compile(rb'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:|"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def error_response(e: ApiError) -> JSONResponse:
    # a full queue (429) or a server shutting down (503): when to try again (the same or another)
    headers = {"Retry-After": "1"} if e.status in (429, 503) else None
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


class ApiKeyMiddleware:
    """Checks `Authorization: Bearer KEY` on every HTTP request, before any routing."""

    def __init__(self, app, api_key: str):
        self.app, self.expected = app, f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            got = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected):
                msg = "missing API key" if not got else "invalid API key"
                err = ApiError(
                    401,
                    f"{msg}: send the server's --api-key as 'Authorization: Bearer KEY'",
                    code="invalid_api_key",
                )
                await error_response(err)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class OriginMiddleware:
    """Refuses (403) a request from a web page (its Origin header) not in allow_origins ('*' = any).
    Outermost, so a foreign page's preflight and simple requests alike stop here."""

    def __init__(self, app, allow_origins: list[str]):
        self.app, self.allowed = app, set(allow_origins)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and "*" not in self.allowed:
            for name, value in scope["headers"]:
                origin = value.decode("latin-1") if name == b"origin" else None
                if origin is not None and origin not in self.allowed:
                    err = ApiError(
                        403,
                        f"requests from web pages are refused unless their origin is allowed: the "
                        f"Origin header is {origin[:200]!r}; start the server with --allow-origin "
                        f"{origin[:200]} to let that page call the API",
                        code="origin_not_allowed",
                    )
                    await error_response(err)(scope, receive, send)
                    return
        await self.app(scope, receive, send)


async def read_body(request, limit: int) -> bytes:
    """The whole body, at most `limit` bytes (413); a JSON Content-Type is required (415)."""
    too_big = ApiError(
        413, f"the request body is larger than {limit} bytes (--max-body-bytes)", code="request_too_large"
    )
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > DRAIN_LIMIT:
        raise too_big
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n <= limit:
            chunks.append(chunk)
        elif n > DRAIN_LIMIT:
            break
    if n > limit:
        raise too_big
    ctype = request.headers.get("content-type", "")
    if ctype.split(";")[0].strip().lower() != "application/json":
        raise ApiError(
            415,
            f"the request body must be JSON, sent with the header 'Content-Type: application/json' "
            f"(got {ctype[:100] or 'no Content-Type'!r})",
            code="unsupported_media_type",
        )
    return b"".join(chunks)


def decode_json(raw: bytes) -> dict:
    """The body as a JSON object, checked by check_json."""
    try:
        body = json.loads(raw)
    except RecursionError:  # thousands of levels: the decoder gives up before check_json could
        key = _deep_key(raw)
        where = f" (in '{key}')" if key else ""
        raise bad(
            f"the request body is nested more than {MAX_DEPTH} levels deep{where}", key, "invalid_json"
        ) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"the request body is not valid JSON: {e}", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise bad(f"the request body must be a JSON object, not {type(body).__name__}", None, "invalid_json")
    check_json(body)
    return body


def check_json(body: dict) -> None:
    """Refuses, naming the field, nesting deeper than MAX_DEPTH and text holding a lone UTF-16
    surrogate ("\\ud800" is valid JSON but not Unicode: no tokenizer can encode it). Iterative,
    since the body may be deep."""
    stack = [(body, "", 1, None)]  # (value, its path, its depth, the top-level key above it)
    while stack:
        value, path, depth, top = stack.pop()
        if isinstance(value, str):
            if _lone_surrogate(value):
                raise bad(
                    f"'{path}' holds a lone UTF-16 surrogate (an unpaired \\ud800-\\udfff escape), which "
                    "is not Unicode text",
                    path,
                )
            continue
        if depth > MAX_DEPTH:
            raise bad(f"'{top}' is nested more than {MAX_DEPTH} levels deep", top, "invalid_json")
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            if isinstance(k, str):
                if _lone_surrogate(k):
                    raise bad(
                        f"a key in {f'{path!r}' if path else 'the request body'} holds a lone UTF-16 "
                        "surrogate, which is not Unicode text",
                        path or None,
                    )
                sub = f"{path}.{k}" if path else k
            else:
                sub = f"{path}[{k}]"
            if isinstance(v, (str, dict, list)):
                stack.append((v, sub, depth + 1, top or sub))


def _lone_surrogate(s: str) -> bool:
    if s.isascii():
        return False
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _deep_key(raw: bytes) -> str | None:
    """The top-level key under which `raw` nests deeper than MAX_DEPTH (None: not found)."""
    depth, key = 0, None
    for m in _JSON_TOKENS.finditer(raw):
        t = m.group(0)
        if m.group(1) is not None:
            if depth == 1:
                key = m.group(1).decode("utf-8", "replace")
        elif t in (b"[", b"{"):
            depth += 1
            if depth > MAX_DEPTH:
                return key
        elif t in (b"]", b"}"):
            depth -= 1
    return None

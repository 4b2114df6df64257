"""`vkdecode serve`: the OpenAI-compatible HTTP API on Starlette (run by uvicorn).

    POST /v1/chat/completions, POST /v1/completions   (stream: server-sent events)
    GET /v1/models, GET /v1/models/{id}, GET /health, GET /metrics

Every error is an OpenAI error body {"error": {"message", "type", "param", "code"}}; with an API key
set, every request must carry `Authorization: Bearer KEY`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import time

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from vkdecode.serve.engine import Engine, Job
from vkdecode.serve.requests import ApiError, parse_chat, parse_completion

MAX_BODY_BYTES = 1 << 20
DRAIN_LIMIT = 64 << 20  # an oversized body is read (and dropped) up to this, so the 413 arrives


def error_response(e: ApiError) -> JSONResponse:
    headers = {"Retry-After": "1"} if e.status == 503 else None
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


async def read_json(request, limit: int) -> dict:
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
    try:
        body = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ApiError(
            400, f"the request body must be a JSON object, not {type(body).__name__}", code="invalid_json"
        )
    return body


def create_app(
    engine: Engine,
    api_key: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    close_engine: bool = True,
    allow_origins: list[str] | None = None,
) -> Starlette:
    """close_engine: the app's shutdown closes the engine (and its model). allow_origins: web pages
    (origins) whose scripts may call the API from a browser (CORS)."""

    def guarded(handler):
        async def endpoint(request):
            try:
                return await handler(request)
            except ApiError as e:
                return error_response(e)

        return endpoint

    async def health(request):
        m = engine.metrics()
        return JSONResponse({"status": "ok", "model": engine.model_id, "queue": m["queue"]})

    async def metrics(request):
        m = engine.metrics()
        if request.query_params.get("regions") not in ("1", "true"):
            m["step"] = {k: v for k, v in m["step"].items() if k != "region_table"}
        return JSONResponse(m)

    def model_card() -> dict:
        return {"id": engine.model_id, "object": "model", "created": engine.created, "owned_by": "vkdecode"}

    async def models(request):
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def model(request):
        if request.path_params["model"] != engine.model_id:
            raise ApiError(
                404,
                f"the model {request.path_params['model']!r} does not exist; this server "
                f"serves {engine.model_id!r}",
                "model",
                "model_not_found",
            )
        return JSONResponse(model_card())

    async def chat(request):
        body = await read_json(request, max_body_bytes)
        return await respond(request, parse_chat(body, engine.model, engine.model_id, _random_seed))

    async def completions(request):
        body = await read_json(request, max_body_bytes)
        return await respond(request, parse_completion(body, engine.model, engine.model_id, _random_seed))

    async def respond(request, req):
        job = Job(req, asyncio.get_running_loop(), asyncio.Queue())
        engine.submit(job)
        shape = Shape(req.kind, engine.model_id)
        if req.stream:
            return StreamingResponse(
                sse(job, shape),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        parts, checked = [], time.monotonic()
        try:
            while True:
                try:
                    kind, data = await asyncio.wait_for(job.events.get(), 0.25)
                except asyncio.TimeoutError:
                    kind = None
                if time.monotonic() - checked >= 0.25:  # tokens may arrive faster than that
                    checked = time.monotonic()
                    if await request.is_disconnected():
                        return JSONResponse({}, status_code=499)  # nobody reads it
                if kind == "text":
                    parts.append(data)
                elif kind == "error":
                    return error_response(data)
                elif kind == "done":
                    return JSONResponse(shape.whole("".join(parts), data))
        finally:
            job.cancel()  # a no-op once done; stops the generation when the client left

    async def sse(job: Job, shape: Shape):
        try:
            if shape.kind == "chat":
                yield shape.event(shape.chunk({"role": "assistant", "content": ""}))
            while True:
                kind, data = await job.events.get()
                if kind == "text":
                    yield shape.event(shape.chunk(data))
                elif kind == "error":
                    yield shape.event(data.body())
                    return
                else:
                    yield shape.event(shape.chunk(None, data["finish_reason"], timings=data["timings"]))
                    if job.req.include_usage:
                        yield shape.event(dict(shape.head("chunk"), choices=[], usage=data["usage"]))
                    yield "data: [DONE]\n\n"
                    return
        finally:
            job.cancel()  # the client went away mid-stream (or the stream ended): free the device

    async def http_error(request, exc: HTTPException):
        return error_response(
            ApiError(
                exc.status_code,
                f"{request.method} {request.url.path}: {exc.detail}",
                code="not_found" if exc.status_code == 404 else None,
            )
        )

    async def internal_error(request, exc: Exception):
        return error_response(ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if close_engine:
            await asyncio.get_running_loop().run_in_executor(None, engine.close)

    routes = [
        Route("/health", guarded(health)),
        Route("/metrics", guarded(metrics)),
        Route("/v1/models", guarded(models)),
        Route("/v1/models/{model:path}", guarded(model)),
        Route("/v1/chat/completions", guarded(chat), methods=["POST"]),
        Route("/v1/completions", guarded(completions), methods=["POST"]),
    ]
    from starlette.middleware import Middleware
    from starlette.middleware.cors import CORSMiddleware

    middleware = []
    if allow_origins:  # outermost: a browser's preflight (OPTIONS) carries no API key
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=allow_origins,
                allow_methods=["GET", "POST"],
                allow_headers=["Authorization", "Content-Type"],
            )
        )
    if api_key:
        middleware.append(Middleware(ApiKeyMiddleware, api_key=api_key))
    return Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )


class Shape:
    """The OpenAI response objects of one request: chat.completion(.chunk) or text_completion."""

    def __init__(self, kind: str, model_id: str):
        self.kind, self.model_id = kind, model_id
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + secrets.token_hex(12)
        self.created = int(time.time())

    def head(self, what: str) -> dict:
        obj = {"chat": {"whole": "chat.completion", "chunk": "chat.completion.chunk"}}.get(self.kind)
        return {
            "id": self.id,
            "object": obj[what] if obj else "text_completion",
            "created": self.created,
            "model": self.model_id,
        }

    def chunk(self, delta, finish_reason=None, **extra) -> dict:
        if self.kind == "chat":
            d = delta if isinstance(delta, dict) else ({} if delta is None else {"content": delta})
            choice = {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": delta or "", "logprobs": None, "finish_reason": finish_reason}
        return dict(self.head("chunk"), choices=[choice], **extra)

    def whole(self, text: str, done: dict) -> dict:
        if self.kind == "chat":
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": done["finish_reason"],
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": done["finish_reason"]}
        return dict(self.head("whole"), choices=[choice], usage=done["usage"], timings=done["timings"])

    @staticmethod
    def event(obj: dict) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _random_seed() -> int:
    """A request that samples without a seed gets a fresh one (OpenAI's behaviour)."""
    return secrets.randbits(32)

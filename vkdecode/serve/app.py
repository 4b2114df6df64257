"""`vkdecode serve`: the OpenAI-compatible HTTP API on Starlette (run by uvicorn).

    POST /v1/chat/completions, POST /v1/completions   (stream: server-sent events)
    GET /v1/models, GET /v1/models/{id}, GET /health, GET /metrics

A reasoning model's chat answers carry their reasoning apart (message.reasoning_content,
delta.reasoning_content), as llama.cpp's server and vLLM send it (vkdecode/reasoning.py).
Every error is an OpenAI error body {"error": {"message", "type", "param", "code"}}; with an API key
set, every request must carry `Authorization: Bearer KEY`. What is refused before parsing (foreign web
pages, non-JSON bodies, oversized or malformed JSON): vkdecode/serve/guard.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from vkdecode.serve.access_log import AccessLogMiddleware
from vkdecode.serve.engine import Engine, Job
from vkdecode.serve.guard import ApiKeyMiddleware, OriginMiddleware, decode_json, error_response, read_body
from vkdecode.serve.requests import ApiError, parse_chat, parse_completion

MAX_BODY_BYTES = 1 << 20


def create_app(
    engine: Engine,
    api_key: str | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
    close_engine: bool = True,
    allow_origins: list[str] | None = None,
) -> Starlette:
    """close_engine: the app's shutdown closes the engine (and its model). allow_origins: web pages
    (origins) whose scripts may call the API from a browser (CORS); requests from any other page
    are refused."""
    allow_origins = [o.rstrip("/").lower() for o in allow_origins or []]  # as browsers send them

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

    def parse(raw: bytes, parser, **kw):
        body = decode_json(raw)
        return parser(body, engine.tokenizer, engine.model.executor.ctx, engine.model_id, _random_seed, **kw)

    async def generate(request, parser, **kw):
        raw = await read_body(request, max_body_bytes)
        # in a thread: decoding and tokenizing a 1 MB prompt takes a second, /health answers meanwhile
        return await respond(request, await run_in_threadpool(parse, raw, parser, **kw))

    async def chat(request):
        return await generate(request, parse_chat, reasoning=engine.reasoning)

    async def completions(request):
        return await generate(request, parse_completion)

    async def respond(request, req):
        job = Job(req, asyncio.get_running_loop(), asyncio.Queue())
        engine.submit(job)
        shape = Shape(req.kind, engine.model_id)
        if req.stream:
            return StreamingResponse(
                sse(request, job, shape),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        parts, thought, checked = [], [], time.monotonic()
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
                elif kind == "reasoning":
                    thought.append(data)
                elif kind == "error":
                    return error_response(data)
                elif kind == "done":
                    request.state.usage = data["usage"]  # for the access log line
                    reasoning = "".join(thought) if req.reasoning is not None else None
                    return JSONResponse(shape.whole("".join(parts), data, reasoning))
        finally:
            job.cancel()  # a no-op once done; stops the generation when the client left

    async def sse(request, job: Job, shape: Shape):
        try:
            if shape.kind == "chat":
                yield shape.event(shape.chunk({"role": "assistant", "content": ""}))
            while True:
                kind, data = await job.events.get()
                if kind == "text":
                    yield shape.event(shape.chunk(data))
                elif kind == "reasoning":  # as llama.cpp's server and vLLM send it
                    yield shape.event(shape.chunk({"reasoning_content": data}))
                elif kind == "error":
                    yield shape.event(data.body())
                    return
                else:
                    request.state.usage = data["usage"]  # for the access log line
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
        # uvicorn logs the exception with its traceback (Starlette re-raises it after this answer)
        return error_response(ApiError(500, "internal error (the server's log has the details)"))

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

    # outermost: a foreign page is refused first; CORS answers an allowed one's preflight (OPTIONS),
    # which carries no API key
    # the access log outside everything, so refused requests get their line too
    middleware = [Middleware(AccessLogMiddleware), Middleware(OriginMiddleware, allow_origins=allow_origins)]
    if allow_origins:
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

    def whole(self, text: str, done: dict, reasoning: str | None = None) -> dict:
        """reasoning: the message's reasoning_content, where the request's output was split."""
        if self.kind == "chat":
            message = {"role": "assistant", "content": text}
            if reasoning is not None:
                message["reasoning_content"] = reasoning
            choice = {
                "index": 0,
                "message": message,
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

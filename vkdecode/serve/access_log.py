"""One log line per request, as llama-server and uvicorn print them: method, route, status, the
tokens a generation took and the time, written when the response (a stream included) has ended.

    POST /v1/chat/completions 200 prompt 24 (cached 0) completion 12 in 0.41 s

The generation routes leave the request's usage in scope["state"]["usage"] (request.state.usage).
"""

from __future__ import annotations

import logging
import time

LOG = logging.getLogger("vkdecode.serve")


class AccessLogMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        t0, status = time.perf_counter(), [0]

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            LOG.info(access_line(scope, status[0] or 500, time.perf_counter() - t0))


def access_line(scope, status: int, seconds: float) -> str:
    usage = (scope.get("state") or {}).get("usage")
    tokens = ""
    if usage:
        cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        tokens = f" prompt {usage['prompt_tokens']} (cached {cached}) completion {usage['completion_tokens']}"
    return f"{scope['method']} {scope['path']} {status}{tokens} in {seconds:.2f} s"


def enable(level: int = logging.INFO) -> None:
    """Print the access lines on stderr (the CLI's default; the library stays silent unless asked)."""
    if not any(getattr(h, "_vkdecode", False) for h in LOG.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        handler._vkdecode = True
        LOG.addHandler(handler)
    LOG.setLevel(level)
    LOG.propagate = False

"""`vkdecode serve`: an OpenAI-compatible HTTP server (vkdecode/serve/app.py) for one model on one
device. Starlette and uvicorn are imported only here, so `vkdecode run` never loads them."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import sys

from vkdecode.cli.options import decode_options
from vkdecode.errors import UsageError, VkDecodeError

INSTALL_SERVE = "pip install 'vkdecode[serve]' (starlette and uvicorn)"
BACKLOG = 2048  # uvicorn's default (it listens again on the same socket with its own)
# --parallel's default: each request in the batch reserves a KV slot of --ctx rows; the slots may
# take this share of the device memory left after the model (the rest for prompt chunks, the other
# programs' activations and the driver), and no more than PARALLEL_MOST (the widest batch recorded)
PARALLEL_SHARE = 0.5
PARALLEL_MOST = 8


def add_serve_parser(sub) -> None:
    from vkdecode.cli.options import add_model_options, add_reasoning_format_option
    from vkdecode.executors import MODES

    p = sub.add_parser(
        "serve", help="serve a model over an OpenAI-compatible HTTP API (/v1/chat/completions)"
    )
    add_model_options(p)
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=int, default=8080, help="TCP port (default 8080; 0 = any free port)")
    p.add_argument("--mode", default="fused", choices=MODES, help="executor mode (default fused)")
    p.add_argument(
        "--model-id",
        default=None,
        help="the model name clients send and /v1/models lists (default: the file name without .gguf)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("VKDECODE_API_KEY"),
        help="require 'Authorization: Bearer KEY' on every request (default: VKDECODE_API_KEY, else none)",
    )
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let web pages from ORIGIN (e.g. http://localhost:3000; '*' = any) call the API from "
        "a browser (CORS); requests from other pages are refused (403); repeatable",
    )
    p.add_argument(
        "--max-queue",
        type=int,
        default=8,
        help="requests that may wait for the device; more are refused with 429 (default 8)",
    )
    p.add_argument(
        "--parallel",
        type=_parallel,
        default=None,
        metavar="N|auto",
        # argparse %-formats help: the share's % sign is doubled
        help=f"requests decoded together in batched steps (default auto: as many as have their KV "
        f"cache of --ctx rows fit in {PARALLEL_SHARE:.0%}% of the device memory the model leaves, at "
        f"most {PARALLEL_MOST}, at least 1; a request alone decodes on the single-sequence step all "
        f"the same); 1: one at a time",
    )
    add_reasoning_format_option(p, none=True)
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug"],
        help="uvicorn's log level (default warning); one line per request is logged unless error or critical",
    )
    p.set_defaults(func=cmd_serve)


def default_model_id(path: str) -> str:
    name = os.path.basename(os.path.normpath(path))
    return name[:-5] if name.lower().endswith(".gguf") else name


def _parallel(text: str) -> int | None:
    """--parallel N, or auto (None: chosen from memory once the model is loaded)."""
    return None if text == "auto" else int(text)


def check_args(args) -> None:
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be 0..65535")
    if args.max_queue < 1:
        raise UsageError("--max-queue must be at least 1")
    if args.parallel is not None and args.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if args.max_body_bytes < 1024:
        raise UsageError("--max-body-bytes must be at least 1024")
    if args.api_key is not None and not args.api_key.strip():
        raise UsageError("--api-key must not be empty")
    for origin in args.allow_origin:
        # a browser's Origin header is scheme://host[:port], nothing more: anything else never matches
        if origin != "*" and not re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#\s]+/?", origin):
            raise UsageError(
                f"--allow-origin {origin!r}: give an origin as a browser sends it, "
                "scheme://host[:port] (e.g. http://localhost:3000), or '*' for any"
            )


def default_parallel(left_bytes: int, slot_bytes: int) -> int:
    """--parallel when not given: the KV slots (slot_bytes each) that fit in PARALLEL_SHARE of the
    device memory the loaded model left (left_bytes), at most PARALLEL_MOST, at least 1."""
    if slot_bytes <= 0:
        return PARALLEL_MOST
    return max(1, min(PARALLEL_MOST, int(left_bytes * PARALLEL_SHARE) // slot_bytes))


def model_parallel(model) -> int:
    """default_parallel for a loaded model: its device's device-local memory less what is
    allocated (Vulkan tells no free memory without VK_EXT_memory_budget), its KV slot at --ctx."""
    from vkdecode.executors.batch import slot_bytes

    dev = model.device
    return default_parallel(dev.info.device_local_bytes - dev.allocated_bytes, slot_bytes(model.executor))


def listen_socket(host: str, port: int) -> socket.socket:
    """Bound here, not by uvicorn, so a busy port is a one-line error and port 0 tells its number."""
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET  # a host name: resolved by bind
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise VkDecodeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def few_malloc_arenas(arenas: int = 2) -> bool:
    """glibc gives each thread that allocates its own heap arena and keeps what it frees there;
    with requests parsed and tokenized on up to 40 worker threads, 64 concurrent 4,000-word prompts
    grew the server by ~30 MB a minute (a 1-minute soak, bench/serve_load.py --long-words 4000), as
    fragmentation, not a leak. A few shared arenas keep it flat (in-process, 64 x 30 long prompts
    on 40 threads: 196 MB with 2 arenas, 258 MB with glibc's default). Set before the worker
    threads start; a no-op (False) where the C library has no mallopt."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(-8, arenas))  # -8: M_ARENA_MAX
    except (OSError, AttributeError):
        return False


def cmd_serve(args) -> int:
    check_args(args)
    few_malloc_arenas()
    try:
        import starlette  # noqa: F401
        import uvicorn
    except ImportError as e:
        raise VkDecodeError(f"vkdecode serve needs {e.name}: {INSTALL_SERVE}") from None
    import vkdecode
    from vkdecode.default_model import resolve_model
    from vkdecode.reasoning import resolve
    from vkdecode.serve.app import create_app
    from vkdecode.serve.batch_engine import make_engine

    # the sampling build serves greedy (temperature 0) and sampled requests alike
    options = decode_options(args, sampling=True)
    path = resolve_model(args.model)
    sock = listen_socket(args.host, args.port)
    try:
        model = vkdecode.load(path, device=args.device, options=options)
    except BaseException:
        sock.close()
        raise
    parallel = args.parallel or model_parallel(model)
    reasoning = resolve(args.reasoning_format, model.reasoning_format)
    engine = make_engine(
        model, args.model_id or default_model_id(path), args.max_queue, parallel, reasoning=reasoning
    )
    app = create_app(
        engine, api_key=args.api_key, max_body_bytes=args.max_body_bytes, allow_origins=args.allow_origin
    )
    host, port = sock.getsockname()[:2]
    # listening before the banner names the address: a client that connects at once then waits in
    # the backlog until uvicorn accepts; it was refused before (tests/cli/test_cli_serve.py)
    sock.listen(BACKLOG)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"vkdecode serve: {engine.model_id} ({model.mode}, ctx {model.executor.ctx}"
        f"{f', reasoning {reasoning}' if reasoning else ''}) on "
        f"{model.device.info.name}\n  OpenAI API at http://{shown}:{port}/v1  (queue {args.max_queue}, "
        f"parallel {parallel}{'' if args.parallel else ' (auto)'}, "
        f"API key {'required' if args.api_key else 'off'})",
        file=sys.stderr,
        flush=True,
    )
    if not args.api_key and not _loopback(args.host):
        print(
            f"warning: listening on {args.host} without --api-key: anyone who can reach it can use it",
            file=sys.stderr,
            flush=True,
        )
    # one line per request from vkdecode's own access log (tokens included), not uvicorn's
    from vkdecode.serve import access_log

    if args.log_level in ("info", "debug", "warning"):
        access_log.enable()
    config = uvicorn.Config(app, log_level=args.log_level, access_log=False, timeout_graceful_shutdown=5)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down gracefully on Ctrl-C, then re-raises it
        print("vkdecode serve: stopped", file=sys.stderr)
    finally:
        engine.close()  # idempotent: the app's shutdown has normally closed it already
        sock.close()
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"

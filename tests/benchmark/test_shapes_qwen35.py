"""vkdecode.benchmark's Qwen3.5 shapes: the published configs as vkdecode's HF reader reads them,
their sizes and llama.cpp's Q4_K_M mix, the full programs built, and `vkdecode bench --shape
--layers` on lavapipe-wide variants of each (both layer kinds, or a linear-only cut)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vkdecode import benchmark as bench
from vkdecode.benchmark.shapes import SHAPES, shape_args, weight_dtypes
from vkdecode.models.config import ModelArgs
from vkdecode.models.gguf_names import expected_shapes
from vkdecode.models.qwen35 import FULL, LINEAR

# text_config of Qwen3.5-35B-A3B's and Qwen3.5-27B's config.json as recalled (no hub here)
ROPE = {
    "rope_type": "default",
    "rope_theta": 10000000,
    "partial_rotary_factor": 0.25,
    "mrope_section": [11, 11, 10],
    "mrope_interleaved": True,
}
TEXT = {
    "head_dim": 256,
    "vocab_size": 248320,
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "rope_parameters": ROPE,
    "attn_output_gate": True,
    "attention_bias": False,
    "mtp_num_hidden_layers": 1,
}
CONFIGS = {
    "qwen3.5-35b-a3b": (
        "Qwen3_5MoeForConditionalGeneration",
        {
            **TEXT,
            "model_type": "qwen3_5_moe_text",
            "num_hidden_layers": 40,
            "hidden_size": 2048,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "linear_num_value_heads": 32,
            "num_experts": 256,
            "num_experts_per_tok": 8,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
        },
    ),
    "qwen3.5-27b": (
        "Qwen3_5ForConditionalGeneration",
        {
            **TEXT,
            "model_type": "qwen3_5_text",
            "num_hidden_layers": 64,
            "hidden_size": 5120,
            "num_attention_heads": 24,
            "num_key_value_heads": 4,
            "linear_num_value_heads": 48,
            "intermediate_size": 17408,
        },
    ),
}
# llama.cpp's use_more_bits on 40 layers: the first and last 5, and 7, 10, ..., 34
MORE_BITS_40 = [*range(5), *range(7, 35, 3), *range(35, 40)]


@pytest.mark.parametrize("shape", sorted(CONFIGS))
def test_shapes_are_the_published_configs(shape):
    """Each shape is what vkdecode's HF reader makes of the recalled config.json (the partial
    rotary as 64 rotary dims, the layer types from full_attention_interval), but for the V-head
    order, llama.cpp's GGUF one (the layout shape_gguf's files have)."""
    cls, text = CONFIGS[shape]
    cfg = {"architectures": [cls], "tie_word_embeddings": False, "text_config": text}
    hf = dataclasses.asdict(ModelArgs.from_hf_config(cfg))
    ours = dataclasses.asdict(shape_args(shape))
    assert ours.pop("v_heads_tiled") and not hf.pop("v_heads_tiled")
    for k in ("bos_id", "eos_ids"):
        hf.pop(k), ours.pop(k)
    assert ours == hf
    a = shape_args(shape)
    assert a.layer_types[:4] == (LINEAR, LINEAR, LINEAR, FULL)
    assert a.layer_types.count(FULL) == a.n_layers // 4


def test_sizes():
    """Qwen3.5-35B-A3B: 34.7 B weights, 3.45 B of them read per token (8 of 256 experts);
    Qwen3.5-27B: 26.9 B (the vision tower and the prediction layer left out)."""
    moe = expected_shapes(shape_args("qwen3.5-35b-a3b"))
    total = sum(int(np.prod(s)) for s in moe.values())
    experts = sum(int(np.prod(s)) for n, s in moe.items() if ".exp_" in n)
    assert total == 34_660_610_688 and experts == 40 * 256 * 3 * 512 * 2048
    assert round((total - experts * (1 - 8 / 256)) / 1e9, 2) == 3.45
    dense = expected_shapes(shape_args("qwen3.5-27b"))
    assert sum(int(np.prod(s)) for s in dense.values()) == 26_895_998_464


def test_q4_k_m_mix():
    """llama.cpp's Q4_K_M: attn_qkv (the linear layers' in_proj_qkv) q5_k; attn_v q6_k by its count
    among the 40 attn_v + attn_qkv tensors (the first 5 and the 8th of the 10 attn_v); ffn_down_exps
    and ffn_down_shexp q6_k in the _more_bits layers; router and shared-expert gate f32 (left out)."""
    a = shape_args("qwen3.5-35b-a3b")
    d = weight_dtypes(a, "q4_k_m")
    assert {d[f"layers.{i}.lin_qkv"] for i in range(40) if a.layer_types[i] == LINEAR} == {"q5_k"}
    assert [i for i in range(40) if d.get(f"layers.{i}.wv") == "q6_k"] == [3, 7, 11, 15, 19, 31]
    for k in ("exp_down", "shexp_down"):
        assert [i for i in range(40) if d[f"layers.{i}.{k}"] == "q6_k"] == MORE_BITS_40
    rest = {"wq", "wgate", "wk", "wo", "lin_z", "lin_b", "lin_a", "lin_out", "exp_gate", "shexp_up"}
    assert {d[f"layers.{i}.{k}"] for i in range(40) for k in rest if f"layers.{i}.{k}" in d} == {"q4_k"}
    assert d["lm_head"] == "q6_k" and d["tok_embd"] == "q4_k"
    assert not {"layers.0.router", "layers.0.shexp_gate_inp", "layers.0.lin_conv"} & set(d)
    d27 = weight_dtypes(shape_args("qwen3.5-27b"), "q4_k_m")
    # 16 attn_v of 64: the first 8, then the 11th and 14th
    assert [i for i in range(64) if d27.get(f"layers.{i}.wv") == "q6_k"] == [*range(3, 32, 4), 43, 55]


@pytest.mark.parametrize("shape", sorted(CONFIGS))
def test_full_programs_build(shape):
    from fusion.partition import partition
    from vkdecode.models import build_program

    a = shape_args(shape)
    p = build_program(a, 256, weight_dtypes(a, "q4_k_m"))
    ops = [op.kind for op in p.ops]
    assert ops.count("gated_delta_step") == 3 * a.n_layers // 4
    assert ops.count("sigmoid_scale") >= a.n_layers // 4  # the full layers' output gates
    assert partition(p)


# each shape's structure (head_dim 256 with 64 rotary dims, 128-wide linear heads, kernel 4; the
# ratios of q to KV heads and of V to key heads; a shared expert) at a width lavapipe can afford:
# 256-wide rows keep the K-quants whole
NARROW = {
    "qwen3.5-35b-a3b": {
        "hidden_size": 256,
        "n_heads": 8,
        "n_kv_heads": 1,
        "linear_attn": (2, 4, 128, 128, 4),
        "vocab_size": 600,
        "intermediate_size": 256,
        "n_experts": 16,
        "n_experts_used": 4,
        "expert_ffn": 256,
        "shared_expert_ffn": 256,
    },
    "qwen3.5-27b": {
        "hidden_size": 256,
        "n_heads": 6,
        "n_kv_heads": 1,
        "linear_attn": (1, 3, 128, 128, 4),
        "vocab_size": 600,
        "intermediate_size": 512,
    },
}


@pytest.mark.parametrize("shape", sorted(NARROW))
def test_bench_on_narrow_variants(device, monkeypatch, capsys, shape):
    """`vkdecode bench --shape S --layers 4` (three linear layers and a full one) agrees across
    modes; --layers 2 (linear layers only: no KV cache, only recurrent states) too."""
    from vkdecode.cli import main

    name = f"narrow-{shape}"
    monkeypatch.setitem(SHAPES, name, {**SHAPES[shape], **NARROW[shape]})
    model = bench.random_model(name, "q4_k_m", ctx=64, prompt_tokens=3, n_layers=4)
    assert model.args.layer_types == (LINEAR, LINEAR, LINEAR, FULL)
    w = model.weights
    assert (w["layers.0.lin_qkv"].dtype, w["layers.3.wgate"].dtype) == ("q5_k", "q4_k")
    res = bench.run_bench(device, model, ["fused", "unfused"], n=4, reps=1, warmup=0, copy_bytes=1 << 20)
    assert res["agreement"]["ok"]
    argv = ["bench", "--shape", name, "--quant", "q4_k_m", "--layers", "2", "--ctx", "64", "-n", "3"]
    argv += ["--reps", "1", "--warmup", "0", "--prompt-tokens", "2", "--copy-mib", "0", "--quiet"]
    assert main(argv) == 0
    assert f"{name}-2l" in capsys.readouterr().out

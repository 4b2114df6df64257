"""Qwen3.5 bench shapes (models/qwen35.py, qwen35moe.py), merged into shapes.SHAPES. The model hub is
not reachable here: these are Qwen3.5-35B-A3B's and Qwen3.5-27B's published configs (text_config) as
recalled, in the fields vkdecode's HF reader makes of them (tests/benchmark/test_shapes_qwen35.py)."""

from __future__ import annotations

from vkdecode.models.qwen35_gguf import interval_types


def layer_types(n: int) -> tuple[str, ...]:
    """Three Gated DeltaNet layers, then a gated full-attention one (full_attention_interval 4); a
    --layers cut keeps the first n, so one of 3 or fewer has no full layer (and no KV cache)."""
    return interval_types(n, 4)


QWEN35 = {  # what both share
    "head_dim": 256,
    "vocab_size": 248320,
    "tie_embeddings": False,
    "qk_norm": True,
    "rope_theta": 10_000_000.0,
    "rope_layout": "neox",
    "max_position": 262144,
    "rotary_dim": 64,  # partial_rotary_factor 0.25 (mrope_section [11, 11, 10]: text positions alike)
    "v_heads_tiled": True,  # llama.cpp's GGUF V-head order, as shape_gguf's files of them load
}
QWEN35_SHAPES = {
    "qwen3.5-35b-a3b": {
        **QWEN35,
        "arch": "qwen3_5_moe",
        "n_layers": 40,
        "hidden_size": 2048,
        "n_heads": 16,
        "n_kv_heads": 2,
        "intermediate_size": 512,  # no dense MLP: qwen35moe.from_hf's stand-in (expert_ffn)
        "layer_types": layer_types(40),
        "linear_attn": (16, 32, 128, 128, 4),  # key heads, value heads, key dim, value dim, conv kernel
        "n_experts": 256,
        "n_experts_used": 8,
        "expert_ffn": 512,
        "norm_topk_prob": True,
        "shared_expert_ffn": 512,  # with its sigmoid gate (qwen2moe's)
    },
    "qwen3.5-27b": {
        **QWEN35,
        "arch": "qwen3_5",
        "n_layers": 64,
        "hidden_size": 5120,
        "n_heads": 24,
        "n_kv_heads": 4,
        "intermediate_size": 17408,
        "layer_types": layer_types(64),
        "linear_attn": (16, 48, 128, 128, 4),
    },
}

"""Mixture-of-experts bench shapes (models/moe.py), merged into shapes.SHAPES: Qwen3-30B-A3B as its
config.json has it, and a lavapipe-sized variant of the same family for tests."""

from __future__ import annotations

QWEN3_30B_A3B = {
    "arch": "qwen3moe",
    "n_layers": 48,
    "hidden_size": 2048,
    "n_heads": 32,
    "n_kv_heads": 4,
    "head_dim": 128,
    # config.json's; every layer is sparse (no mlp_only_layers), so only the GGUF header carries it
    "intermediate_size": 6144,
    "vocab_size": 151936,
    "tie_embeddings": False,
    "qk_norm": True,
    "rope_theta": 1000000.0,
    "rope_layout": "neox",
    "max_position": 40960,
    "n_experts": 128,
    "n_experts_used": 8,
    "expert_ffn": 768,
    "norm_topk_prob": True,
}

# the widths of the dense `tiny` shape (shapes.py), shared by its MoE twin
TINY_DIMS = {
    "n_layers": 2,
    "hidden_size": 64,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "vocab_size": 512,
}

MOE_SHAPES = {
    "qwen3-30b-a3b": QWEN3_30B_A3B,
    # 8 experts: llama.cpp's Q4_K_M gives an 8-expert model (Mixtral) its own attention types
    # (shapes.EIGHT_EXPERTS), which this shape exercises; the 128-expert shape does not get them
    "qwen3moe-tiny": {
        **QWEN3_30B_A3B,
        **TINY_DIMS,
        "n_experts": 8,
        "n_experts_used": 2,
        "expert_ffn": 32,
    },
}

"""Mixture-of-experts bench shapes (models/moe.py), merged into shapes.SHAPES: Qwen3-30B-A3B and
gpt-oss-20b as their config.json have them, and a lavapipe-sized variant of the qwen3moe family."""

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

# gpt-oss-20b (models/gpt_oss.py) as llama.cpp's GGUF runs it: even layers slide over 128 keys, YaRN
# with the ramp truncated (llama.cpp always truncates; transformers' config says truncate = false)
# and llama.cpp's hard-coded GLU constants; q/k/v/o biases, one attention sink a head
GPT_OSS_20B = {
    "arch": "gpt-oss",
    "n_layers": 24,
    "hidden_size": 2880,
    "n_heads": 64,
    "n_kv_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2880,
    "vocab_size": 201088,
    "tie_embeddings": False,
    "rope_theta": 150000.0,
    "rope_layout": "neox",
    "rms_eps": 1e-5,
    "max_position": 131072,
    "rope_scaling": {
        "rope_type": "yarn",
        "factor": 32.0,
        "truncate": True,
        "original_max_position_embeddings": 4096.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
    },
    "attention_bias": True,
    "o_bias": True,
    "sliding_window": 128,
    "layer_types": tuple("sliding_attention" if i % 2 == 0 else "full_attention" for i in range(24)),
    "rope_local_theta": 150000.0,
    "n_experts": 32,
    "n_experts_used": 4,
    "expert_ffn": 2880,
    "norm_topk_prob": True,
    "swiglu_alpha": 1.702,
    "swiglu_limit": 7.0,
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
    "gpt-oss-20b": GPT_OSS_20B,
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

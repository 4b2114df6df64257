"""Qwen3-MoE (HF `Qwen3MoeForCausalLM`, GGUF `qwen3moe`): Qwen3's attention (per-head q/k norm)
and the mixture-of-experts FFN of models/moe.py: softmax router, top-k, the top-k weights
renormalised when norm_topk_prob (llama.cpp's qwen3moe always renormalises), SwiGLU experts.
Layers in mlp_only_layers or off the decoder_sparse_step grid keep a dense MLP (HF only).
"""

from __future__ import annotations

from vkdecode.models import moe
from vkdecode.models.arch import Architecture
from vkdecode.models.llama import Builder


class Qwen3MoeBuilder(moe.MoeMixin, Builder):
    pass


ARCHITECTURE = Architecture(
    "qwen3moe",
    Qwen3MoeBuilder,
    ("Qwen3MoeForCausalLM",),
    ("qwen3_moe",),
    qk_norm=True,
    hf_sliding_flag=True,
    # Qwen3MoeConfig's defaults
    hf_defaults={"num_key_value_heads": 4, "max_position_embeddings": 32768},
    gguf_implemented=frozenset({"expert_count", "expert_used_count"}),
    hf_fields=moe.hf_fields,
    gguf_fields=moe.gguf_fields,
    layer_names=moe.MOE_NAMES,
)

"""Qwen2-MoE (HF `Qwen2MoeForCausalLM`): Qwen2's attention (q/k/v biases) and the MoE FFN of
models/moe.py plus a shared expert every token runs, scaled by sigmoid(shared_expert_gate . h)
(sigmoid_scale) and added after the experts' weighted sum. norm_topk_prob (default false),
decoder_sparse_step and mlp_only_layers as Qwen3-MoE (HF only: GGUF layers are all sparse).
"""

from __future__ import annotations

from vkdecode.errors import ModelError
from vkdecode.models import moe, settings
from vkdecode.models.arch import Architecture
from vkdecode.models.llama import Builder

NAMES = {
    **moe.MOE_NAMES,
    "shexp_gate": ("mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"),
    "shexp_up": ("mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"),
    "shexp_down": ("mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"),
    "shexp_gate_inp": ("mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"),
}


class Qwen2MoeBuilder(moe.MoeMixin, Builder):
    pass


def hf_fields(cfg: dict, where: str) -> dict:
    if not settings.flag(cfg, "qkv_bias", True, where):
        raise ModelError(f"{where}: key 'qkv_bias' = false is not supported (qwen2moe has q/k/v biases)")
    return moe.hf_fields(cfg, where, shared=True)


def gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    # llama.cpp's qwen2moe: top-k weights not renormalised unless expert_weights_norm says so
    return moe.gguf_fields(key, n_layers, hidden, heads, norm=False, shared=True)


ARCHITECTURE = Architecture(
    "qwen2moe",
    Qwen2MoeBuilder,
    ("Qwen2MoeForCausalLM",),
    ("qwen2_moe",),
    qkv_bias=True,
    hf_o_bias=False,
    hf_sliding_flag=True,
    hf_defaults={"num_key_value_heads": 16, "max_position_embeddings": 32768},  # Qwen2MoeConfig's
    hf_fields=hf_fields,
    gguf_implemented=frozenset({"expert_count", "expert_used_count"}),
    gguf_fields=gguf_fields,
    layer_names=NAMES,
)

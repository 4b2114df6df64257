"""Mixtral (HF `MixtralForCausalLM`): Llama's attention (no q/k norm, no biases) and the MoE FFN of
models/moe.py: softmax router over num_local_experts, top num_experts_per_tok, weights always
renormalised (softmax over the top-k logits), experts of intermediate_size. Router jitter noise
only applies in training. llama.cpp writes Mixtral GGUFs as `llama` with expert counts: llama.py
reads those (its LlamaBuilder has the same MoE hooks).
"""

from __future__ import annotations

from vkdecode.errors import ModelError
from vkdecode.models import moe
from vkdecode.models.arch import Architecture
from vkdecode.models.llama import Builder

NAMES = {
    "router": ("block_sparse_moe.gate.weight", "ffn_gate_inp.weight"),
    "exp_gate": ("block_sparse_moe.experts.{e}.w1.weight", "ffn_gate_exps.weight"),
    "exp_up": ("block_sparse_moe.experts.{e}.w3.weight", "ffn_up_exps.weight"),
    "exp_down": ("block_sparse_moe.experts.{e}.w2.weight", "ffn_down_exps.weight"),
}


class MixtralBuilder(moe.MoeMixin, Builder):
    pass


def hf_fields(cfg: dict, where: str) -> dict:
    """Mixtral's keys: every layer sparse, experts as wide as intermediate_size, always renormalised."""
    fields = moe.hf_fields({**cfg, "moe_intermediate_size": cfg.get("intermediate_size")}, where)
    for key in ("decoder_sparse_step", "mlp_only_layers", "norm_topk_prob"):
        if cfg.get(key) not in (None, [], 1, True):  # keys of other MoE families
            raise ModelError(f"{where}: key {key!r} = {cfg[key]!r} is not a Mixtral setting")
    return {**fields, "norm_topk_prob": True}


ARCHITECTURE = Architecture(
    "mixtral",
    MixtralBuilder,
    ("MixtralForCausalLM",),
    ("mixtral",),
    hf_defaults={"num_key_value_heads": 8, "max_position_embeddings": 4096 * 32},  # MixtralConfig's
    hf_fields=hf_fields,
    layer_names=NAMES,
)

"""OLMoE (HF `OlmoeForCausalLM`): Llama's attention with an RMSNorm over the whole q and the whole k
projection (not per head: weights of q_dim and kv_dim, the rms_norm op's whole-vector form) and the
MoE FFN of models/moe.py with experts of intermediate_size, renormalised if norm_topk_prob.
clip_qkv (clamping q, k, v) is refused. GGUF `olmoe` as llama.cpp reads it (never renormalised).
"""

from __future__ import annotations

from vkdecode.errors import ModelError
from vkdecode.models import moe
from vkdecode.models.arch import Architecture
from vkdecode.models.llama import Builder


class OlmoeBuilder(moe.MoeMixin, Builder):
    @classmethod
    def weight_shapes(cls, args) -> dict[str, tuple[int, ...]]:
        shapes = super().weight_shapes(args)
        for i in range(args.n_layers):  # whole-projection q/k norms
            shapes[f"layers.{i}.q_norm"], shapes[f"layers.{i}.k_norm"] = (args.q_dim,), (args.kv_dim,)
        return shapes


def hf_fields(cfg: dict, where: str) -> dict:
    if cfg.get("clip_qkv") is not None:
        raise ModelError(f"{where}: key 'clip_qkv' = {cfg['clip_qkv']!r} (clamped q/k/v) is not supported")
    for key in ("decoder_sparse_step", "mlp_only_layers", "shared_expert_intermediate_size"):
        if cfg.get(key) not in (None, [], 1, 0):  # keys of other MoE families
            raise ModelError(f"{where}: key {key!r} = {cfg[key]!r} is not an OLMoE setting")
    return moe.hf_fields({**cfg, "moe_intermediate_size": cfg.get("intermediate_size")}, where)


def gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    # llama.cpp's olmoe: experts of feed_forward_length, top-k weights not renormalised
    return moe.gguf_fields(key, n_layers, hidden, heads, ffn_default=key("feed_forward_length"), norm=False)


ARCHITECTURE = Architecture(
    "olmoe",
    OlmoeBuilder,
    ("OlmoeForCausalLM",),
    ("olmoe",),
    qk_norm=True,
    hf_defaults={"max_position_embeddings": 4096},  # OlmoeConfig's
    hf_fields=hf_fields,
    gguf_implemented=frozenset({"expert_count", "expert_used_count"}),
    gguf_fields=gguf_fields,
    layer_names=moe.MOE_NAMES,
)

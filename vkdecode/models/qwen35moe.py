"""Qwen3.5-MoE (text: HF `Qwen3_5MoeForCausalLM`, and the text model of
`Qwen3_5MoeForConditionalGeneration`, how Qwen ships it): Qwen3.5's layers exactly as qwen35.py
builds them (Gated DeltaNet linear attention, gated full attention with a partial rotary, 1 + w
norms), each with the MoE FFN of moe.py plus Qwen2-MoE's shared expert, scaled by
sigmoid(shared_expert_gate . h) (transformers' modeling_qwen3_5_moe.py).

transformers' Qwen3.5-MoE routes every layer through its experts and always renormalises the top-k
weights; its configs carry no norm_topk_prob / decoder_sparse_step / mlp_only_layers (nor
intermediate_size: there is no dense MLP), and a config that sets them otherwise is refused.
Checkpoints store the experts fused (`experts.gate_up_proj` (experts, 2 ffn, hidden), gate rows
first, and `experts.down_proj` (experts, hidden, ffn)) or one tensor per expert (what
transformers' save_pretrained writes): both are read, the fused ones through views.
"""

from __future__ import annotations

from vkdecode.errors import ModelError
from vkdecode.models import moe, qwen2moe, qwen35, qwen35_gguf
from vkdecode.models.arch import Architecture, HfView

# keys transformers' Qwen3.5-MoE accepts and ignores -> the values that mean what it computes
NEUTRAL = {"norm_topk_prob": (None, True), "decoder_sparse_step": (None, 1), "mlp_only_layers": (None, [])}


def from_hf(cfg: dict, where: str) -> dict:
    cfg, where = qwen35.text_config(cfg, where, ARCHITECTURE)
    for key, neutral in NEUTRAL.items():
        if cfg.get(key) not in neutral:
            raise ModelError(
                f"{where}: key {key!r} = {cfg[key]!r} is not supported for qwen3_5_moe (transformers' "
                "Qwen3.5-MoE routes every layer through its experts and renormalises the top-k weights)"
            )
    experts = moe.hf_fields({**cfg, "norm_topk_prob": True}, where, shared=True)
    # no dense MLP: intermediate_size (absent from Qwen3.5-MoE configs) sizes nothing here
    cfg = {**cfg, "intermediate_size": cfg.get("intermediate_size") or experts["expert_ffn"]}
    return {**qwen35.read_text(cfg, where, ARCHITECTURE), **experts}


def _gate_up(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The stored gate_up_proj shape of a program expert weight (experts, ffn, hidden)."""
    return (shape[0], 2 * shape[1], shape[2])


def _half(part: int):
    """gate_up_proj (experts, 2 ffn, hidden) -> its gate (part 0) or up (part 1) rows."""
    return lambda a: a.reshape(a.shape[0], 2, -1, a.shape[-1])[:, part]


FUSED_EXPERTS = {
    "exp_gate": HfView("mlp.experts.gate_up_proj", _gate_up, _half(0), if_stored=True),
    "exp_up": HfView("mlp.experts.gate_up_proj", _gate_up, _half(1), if_stored=True),
    "exp_down": HfView("mlp.experts.down_proj", tuple, lambda a: a, if_stored=True),
}


def hf_views(args) -> dict:
    return {**qwen35.hf_views(args), **FUSED_EXPERTS}


class Qwen35MoeBuilder(moe.MoeMixin, qwen35.Qwen35Builder):
    pass


def gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    return {
        **qwen35_gguf.text_fields(key, n_layers, hidden, heads),
        **qwen35_gguf.moe_fields(key, n_layers, hidden, heads),
    }


def check(args) -> None:
    qwen35.check(args)
    if not (args.n_experts and args.shared_expert_ffn) or args.dense_layers:
        raise ModelError("qwen3_5_moe needs experts and a shared expert in every layer")


ARCHITECTURE = Architecture(
    "qwen3_5_moe",
    Qwen35MoeBuilder,
    ("Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration"),
    ("qwen3_5_moe_text",),
    qk_norm=True,
    from_hf=from_hf,
    gguf_name="qwen35moe",
    gguf_fields=gguf_fields,
    gguf_views=qwen35.gguf_views,
    gguf_implemented=qwen35_gguf.IMPLEMENTED,
    check=check,
    hf_defaults={"num_key_value_heads": 2},  # Qwen3_5MoeTextConfig's
    layer_names={**qwen2moe.NAMES, **qwen35.LINEAR_NAMES},
    hf_views=hf_views,
    hf_norms_plus_one=True,
    hf_text_prefix="model.language_model.",
    hf_other_parts=("model.visual.", "mtp."),  # the vision tower, the multi-token prediction heads
)

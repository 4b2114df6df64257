"""The audit of config keys that change the math: each one vkdecode does not implement is refused
with a ModelError naming the key, so no model ever runs silently wrong.

Implemented elsewhere (config.py reads them): hidden size, heads, kv heads, `head_dim` overrides,
`rms_norm_eps`, `rope_theta` / default rope, `tie_word_embeddings`, `attention_bias` (q/k/v, and o
for Llama / Qwen3), `mlp_bias` (Llama). Keys that do not change a greedy decode are let through:
`attention_dropout` (inference), `pretraining_tp` (transformers' Llama ignores it), dtype, ids.
Which spelling of a setting wins (rope forms, tied heads, ...) is settings.py's; rope scaling
types are read, or refused, there and in config_rope.py.
"""

from __future__ import annotations

from vkdecode.errors import ModelError

# Keys other architectures use to change the math (Gemma 2/3 softcapping, Granite multipliers,
# Cohere's logit scale, Llama 4's qk norm and chunked attention, ...). transformers' Llama / Qwen
# classes ignore them, but a config that sets them was made for a model that needs them: we refuse
# rather than run it as if they were absent. key -> its neutral values (accepted).
FOREIGN_HF_KEYS = {
    "logits_scaling": (None, 1, 1.0),
    "logit_scale": (None, 1, 1.0),
    "final_logit_softcapping": (None, 0, 0.0),
    "attn_logit_softcapping": (None, 0, 0.0),
    "embedding_multiplier": (None, 1, 1.0),
    "residual_multiplier": (None, 1, 1.0),
    "attention_multiplier": (None,),
    "query_pre_attn_scalar": (None,),
    "use_qk_norm": (None, False),
    "attention_chunk_size": (None,),
    "no_rope_layers": (None, []),
    "qk_layernorm": (None, False),
}


def _refuse(where: str, key: str, value, what: str) -> None:
    raise ModelError(f"{where}: key {key!r} = {value!r} ({what}) is not supported")


def audit_hf(cfg: dict, arch, where: str) -> None:
    """Refuse every key of an HF config.json that changes the math and is not implemented. arch:
    the Architecture record (models/arch.py)."""
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):  # transformers' ACT2FN maps both to SiLU
        _refuse(where, "hidden_act", act, "only silu is implemented")
    if not arch.hf_sliding_flag and cfg.get("sliding_window") is not None:
        _refuse(where, "sliding_window", cfg["sliding_window"], "sliding-window attention")
    if arch.hf_sliding_flag and cfg.get("use_sliding_window"):
        _refuse(where, "use_sliding_window", cfg["use_sliding_window"], "sliding-window attention")
    layer_types = cfg.get("layer_types") or []
    other = sorted({t for t in layer_types if t != "full_attention"}, key=str)
    if other:
        _refuse(where, "layer_types", other, "only full_attention layers are implemented")
    for key, v in (
        ("partial_rotary_factor", cfg),
        ("rope_parameters", cfg.get("rope_parameters")),
        ("rope_scaling", cfg.get("rope_scaling")),
    ):
        f = v.get("partial_rotary_factor") if isinstance(v, dict) else None
        if f is not None and float(f) != 1.0:
            name = key if key == "partial_rotary_factor" else f"{key}.partial_rotary_factor"
            _refuse(where, name, f, "partial rotary embedding")
    q = cfg.get("quantization_config")
    if q:  # GPTQ / AWQ / bitsandbytes / fp8 tensors and scales: not the plain weights we read
        method = q.get("quant_method", "?") if isinstance(q, dict) else q
        _refuse(where, "quantization_config", method, "quantized safetensors; a GGUF of the model runs")
    for key, neutral in FOREIGN_HF_KEYS.items():
        if key in cfg and cfg[key] not in neutral:
            _refuse(where, key, cfg[key], f"a {arch.name} model does not use it")


# GGUF metadata (after "{arch}.") that llama.cpp writes for math vkdecode does not implement.
# key -> neutral values (accepted); absent keys are always fine.
GGUF_KEYS = {
    "rope.scaling.attn_factor": (1.0,),
    "logit_scale": (1.0,),
    "final_logit_softcapping": (0.0,),
    "attn_logit_softcapping": (0.0,),
    "embedding_scale": (1.0,),
    "residual_scale": (1.0,),
    "attention.scale": (0.0,),
    "attention.sliding_window": (0,),
    "attention.clamp_kqv": (0.0,),
    "attention.causal": (True,),
    "expert_count": (0,),
    "expert_used_count": (0,),
}


def audit_gguf(field, arch: str, path: str, implemented=()) -> None:
    """Refuse GGUF metadata that changes the math and is not implemented. field(name) -> value or
    None; implemented: keys of GGUF_KEYS this architecture reads (Gemma 3's sliding window).
    Rope scaling (type, factor and its old name) is read, or refused, in settings.gguf_rope."""
    skip = set(implemented)
    for key, neutral in GGUF_KEYS.items():
        if key in skip:
            continue
        v = field(f"{arch}.{key}")
        if v is not None and v not in neutral:
            raise ModelError(f"{path}: key '{arch}.{key}' = {v!r} is not supported")
    rms = field(f"{arch}.attention.layer_norm_rms_epsilon")
    ln = field(f"{arch}.attention.layer_norm_epsilon")
    if ln is not None and rms is None:
        raise ModelError(
            f"{path}: key '{arch}.attention.layer_norm_epsilon' (LayerNorm, not RMSNorm) is not supported"
        )
    head_dim = field(f"{arch}.attention.key_length")
    if head_dim is None:
        hidden, heads = field(f"{arch}.embedding_length"), field(f"{arch}.attention.head_count")
        head_dim = hidden // heads if isinstance(hidden, int) and isinstance(heads, int) and heads else None
    rot = None if "rope.dimension_count" in skip else field(f"{arch}.rope.dimension_count")
    if rot is not None and head_dim is not None and int(rot) != int(head_dim):
        raise ModelError(
            f"{path}: key '{arch}.rope.dimension_count' = {rot} differs from head_dim {head_dim} "
            "(partial rotary embedding) is not supported"
        )
    vdim = field(f"{arch}.attention.value_length")
    if vdim is not None and head_dim is not None and int(vdim) != int(head_dim):
        raise ModelError(
            f"{path}: key '{arch}.attention.value_length' = {vdim} differs from the key "
            f"length {head_dim}, which is not supported"
        )

"""Gemma 3 (text) in one module: its config readers (HF `Gemma3ForCausalLM` config.json, GGUF
`gemma3.*` metadata), tensor names and decode step. What differs from Llama must be exact
(transformers' modeling_gemma3.py): GeGLU with gelu_pytorch_tanh (gelu_mul), (1 + w) RMSNorm
weights (weights.py adds the 1 for HF files; llama.cpp's converter already stored w + 1, so
rms_norm is the plain op), q/k norms, sandwich norms (post_attn_norm / post_ffn_norm on each
block's output before its residual add), embeddings scaled by sqrt(hidden), attention scale
query_pre_attn_scalar ** -0.5, and sliding-window layers with their own rope base interleaved with
global ones. Soft-capping and bidirectional attention are refused.
"""

from __future__ import annotations

import math

import numpy as np

from vkdecode.errors import ModelError
from vkdecode.models import rope, settings
from vkdecode.models.arch import Architecture, hf_key, hf_sizes
from vkdecode.models.llama import Builder
from vkdecode.models.settings import FULL, SLIDING

GGUF_SWA_PATTERN = 6  # llama.cpp (and transformers' default): every 6th layer is global
GGUF_SWA_THETA = 10000.0  # llama.cpp's rope_freq_base_train_swa for gemma3
END_OF_TURN = "<end_of_turn>"  # Gemma's chat turns end with it: an EOS even where the file names only <eos>
# Gemma's turn format (its tokenizer_config's template: a system message prefixes the first user
# turn; no image handling), for GGUF files that carry no tokenizer.chat_template, where ChatML
# would be wrong for Gemma
CHAT_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}"
    "{% set msgs = messages[1:] %}{% else %}{% set first = '' %}{% set msgs = messages %}{% endif %}"
    "{% for message in msgs %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') + message['content'] | trim"
    " + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def _layer_types(cfg: dict, n_layers: int, where: str) -> tuple[str, ...]:
    types = cfg.get("layer_types")
    if types is None:
        pattern = cfg.get("sliding_window_pattern", GGUF_SWA_PATTERN)
        if type(pattern) is not int or pattern <= 0:
            raise ModelError(
                f"{where}: key 'sliding_window_pattern' must be a positive integer, not {pattern!r}"
            )
        return tuple(SLIDING if (i + 1) % pattern else FULL for i in range(n_layers))
    if not (isinstance(types, list) and all(t in (SLIDING, FULL) for t in types)):
        raise ModelError(f"{where}: key 'layer_types' must list {SLIDING!r} / {FULL!r}, not {types!r}")
    return tuple(types)


def from_hf(cfg: dict, where: str) -> dict:
    """The ModelArgs fields of an HF Gemma3ForCausalLM config.json, with Gemma's own refusals."""
    key = hf_key(cfg, where)

    # transformers' Gemma 3 reads hidden_activation only (a hidden_act beside it is not used)
    act = cfg.get("hidden_activation") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ModelError(f"{where}: hidden_activation {act!r} is not supported (only gelu_pytorch_tanh)")
    for name in ("attn_logit_softcapping", "final_logit_softcapping"):
        if cfg.get(name) is not None:
            raise ModelError(f"{where}: key {name!r} = {cfg[name]!r} is not supported (soft-capping)")
    if settings.flag(cfg, "use_bidirectional_attention", False, where):
        raise ModelError(f"{where}: key 'use_bidirectional_attention' = true is not supported")
    if settings.flag(cfg, "attention_bias", False, where):
        raise ModelError(f"{where}: key 'attention_bias' = true is not supported for gemma3")
    types = _layer_types(cfg, int(key("num_hidden_layers")), where)
    max_position = int(key("max_position_embeddings", 131072))
    theta, scaling, local_theta = settings.hf_rope_per_layer(cfg, where, max_position)
    window = cfg.get("sliding_window", 4096)  # transformers fails on a null one, sliding layers or not
    if type(window) is not int:
        raise ModelError(f"{where}: key 'sliding_window' must be an integer, not {window!r}")
    return {
        **hf_sizes(cfg, where, kv_heads=4, head_dim=256),  # Gemma3TextConfig's defaults
        "rope_theta": theta,
        "rope_scaling": scaling,
        "max_position": max_position,
        "tie_embeddings": settings.flag(cfg, "tie_word_embeddings", True, where),  # as transformers
        "attention_bias": False,
        "qk_norm": True,
        "rope_layout": "neox",
        "hidden_act": "gelu_tanh",
        "sliding_window": window if SLIDING in types else 0,
        "layer_types": types,
        "rope_local_theta": local_theta,
        "query_pre_attn_scalar": settings.number(
            key("query_pre_attn_scalar", 256), "query_pre_attn_scalar", where
        ),
    }


def gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    """The ModelArgs fields of a gemma3 GGUF beyond the common ones. llama.cpp hard-codes what the
    file does not say: every 6th layer global, sliding layers with rope base 10000, attention
    scale 1/sqrt(head_dim) except for the 27B (62 layers: 1/sqrt(hidden / heads))."""
    head_dim = int(key("attention.key_length", hidden // heads))
    # gguf-py writes the pattern as a period (every n-th layer global) or one bool per layer
    pattern = key("attention.sliding_window_pattern", GGUF_SWA_PATTERN)
    if isinstance(pattern, list):
        if len(pattern) != n_layers:
            raise ModelError(f"attention.sliding_window_pattern lists {len(pattern)} layers, not {n_layers}")
        types = tuple(SLIDING if bool(b) else FULL for b in pattern)
    elif int(pattern) > 0:
        types = tuple(SLIDING if (i + 1) % int(pattern) else FULL for i in range(n_layers))
    else:
        raise ModelError(f"attention.sliding_window_pattern = {pattern} must be positive")
    # llama.cpp's gemma3 hard-codes the sliding base (newer releases may read this key): refused
    # where the two readings differ
    swa_base = key("rope.freq_base_swa", GGUF_SWA_THETA)
    if float(swa_base) != GGUF_SWA_THETA:
        raise ModelError(
            f"key 'gemma3.rope.freq_base_swa' = {swa_base} is not supported (llama.cpp's gemma3 uses "
            f"{GGUF_SWA_THETA:g} for its sliding layers)"
        )
    return {
        "hidden_act": "gelu_tanh",
        "sliding_window": int(key("attention.sliding_window", 4096)),
        "layer_types": types,
        "rope_local_theta": GGUF_SWA_THETA,
        "query_pre_attn_scalar": float(hidden // heads if n_layers == 62 else head_dim),
    }


def tokenizer_defaults(tokenizer) -> None:
    """<end_of_turn> as an EOS, and Gemma's turn format when the file has no chat template."""
    eot = tokenizer.tok.token_to_id(END_OF_TURN)
    if eot is not None:
        tokenizer.eos_ids.add(eot)
    if tokenizer.chat_template is None:
        tokenizer.chat_template = CHAT_TEMPLATE


class Gemma3Builder(Builder):
    EXTRA_NORMS = ("post_attn_norm", "post_ffn_norm")

    def __init__(self, args, ctx: int, weight_dtypes: dict[str, str] | None, sampling: bool = False):
        assert args.qk_norm and args.hidden_act == "gelu_tanh", "gemma3 has q/k norms and GeGLU"
        super().__init__(args, ctx, weight_dtypes, sampling)

    def sliding(self, i: int) -> bool:
        return self.args.layer_types[i] == SLIDING

    def rope_table(self, i: int) -> str:
        a = self.args
        if self.sliding(i):  # sliding layers: their own base, never scaled (transformers, llama.cpp)
            return self.p.constant("rope_freqs_swa", rope.inv_freq(a.rope_local_theta, a.head_dim))
        return super().rope_table(i)

    def window(self, i: int) -> int:
        return self.args.sliding_window if self.sliding(i) else 0

    def attn_scale(self) -> float:
        return self.args.query_pre_attn_scalar**-0.5

    def post_norm(self, i: int, which: str, x: str) -> str:
        a, out = self.args, f"layers.{i}.{which}_post_normed"
        self.p.op(
            "rms_norm", [x, f"layers.{i}.post_{which}_norm"], [self.act(out, a.hidden_size)], eps=a.rms_eps
        )
        return out

    def embed_scale(self) -> float:
        # transformers: embed_tokens(ids) * tensor(sqrt(hidden)) cast to the table's dtype (f32 here)
        return float(np.float32(math.sqrt(self.args.hidden_size)))


def _check(args) -> None:
    if not args.query_pre_attn_scalar > 0:
        raise ModelError(f"query_pre_attn_scalar = {args.query_pre_attn_scalar} must be positive")
    if (args.rope_scaling or {}).get("rope_type") == "yarn":  # its attention factor on global layers only
        raise ModelError("yarn rope scaling on a gemma3 model is not supported")


# HF post_attention_layernorm is Gemma's post-attention norm, not the FFN's input norm as in Llama
LAYER_NAMES = {
    "ffn_norm": ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
    "post_attn_norm": ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    "post_ffn_norm": ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
}
# coop_row_scale: Gemma's activations can pass f16's range (its reference implementations run in
# bf16 or f32; Gemma-3-270M's matmul inputs peak at 272, its residual stream at 1e5, which stays
# f32). The tensor cores read each matmul's rows divided by a power of two where needed, exactly:
# bench/results/llvmpipe/2026-11-28-gemma-f16-inputs (a fixed 2^-8 on every row cost 4x the error).
ARCHITECTURE = Architecture(
    "gemma3",
    Gemma3Builder,
    ("Gemma3ForCausalLM",),
    ("gemma3", "gemma3_text"),
    qk_norm=True,
    gguf_implemented=frozenset({"attention.sliding_window"}),
    from_hf=from_hf,
    gguf_fields=gguf_fields,
    check=_check,
    layer_names=LAYER_NAMES,
    hf_norms_plus_one=True,
    tokenizer_defaults=tokenizer_defaults,
    coop_row_scale=True,
)

"""Tensor names for both formats in one place: program weight name <-> HF safetensors <-> GGUF.

Program weight names (the keys of the weights dict and the Program's weight values):
  tok_embd, layers.{i}.attn_norm, wq, wk, wv, wo, bq, bk, bv, bo (biases), q_norm, k_norm (qwen3),
  ffn_norm, w_gate, w_up, w_down, b_gate, b_up, b_down (biases), out_norm, lm_head (absent when tied);
  gemma3 adds post_attn_norm and post_ffn_norm (its HF post_attention_layernorm is the post-attention norm,
  not the FFN's input norm as in Llama: GEMMA3_NAMES overrides).
"""
from __future__ import annotations

from vkdecode.models.config import ModelArgs

# per-layer program name -> (HF suffix after "model.layers.{i}.", GGUF suffix after "blk.{i}.")
LAYER_NAMES = {
    "attn_norm": ("input_layernorm.weight", "attn_norm.weight"),
    "wq": ("self_attn.q_proj.weight", "attn_q.weight"),
    "wk": ("self_attn.k_proj.weight", "attn_k.weight"),
    "wv": ("self_attn.v_proj.weight", "attn_v.weight"),
    "wo": ("self_attn.o_proj.weight", "attn_output.weight"),
    "bq": ("self_attn.q_proj.bias", "attn_q.bias"),
    "bk": ("self_attn.k_proj.bias", "attn_k.bias"),
    "bv": ("self_attn.v_proj.bias", "attn_v.bias"),
    "bo": ("self_attn.o_proj.bias", "attn_output.bias"),
    "q_norm": ("self_attn.q_norm.weight", "attn_q_norm.weight"),
    "k_norm": ("self_attn.k_norm.weight", "attn_k_norm.weight"),
    "ffn_norm": ("post_attention_layernorm.weight", "ffn_norm.weight"),
    "w_gate": ("mlp.gate_proj.weight", "ffn_gate.weight"),
    "w_up": ("mlp.up_proj.weight", "ffn_up.weight"),
    "w_down": ("mlp.down_proj.weight", "ffn_down.weight"),
    "b_gate": ("mlp.gate_proj.bias", "ffn_gate.bias"),
    "b_up": ("mlp.up_proj.bias", "ffn_up.bias"),
    "b_down": ("mlp.down_proj.bias", "ffn_down.bias"),
}
GEMMA3_NAMES = {
    "ffn_norm": ("pre_feedforward_layernorm.weight", "ffn_norm.weight"),
    "post_attn_norm": ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    "post_ffn_norm": ("post_feedforward_layernorm.weight", "post_ffw_norm.weight"),
}
GLOBAL_NAMES = {
    "tok_embd": ("model.embed_tokens.weight", "token_embd.weight"),
    "out_norm": ("model.norm.weight", "output_norm.weight"),
    "lm_head": ("lm_head.weight", "output.weight"),
}


def expected_shapes(args: ModelArgs) -> dict[str, tuple[int, ...]]:
    """Every weight the program of `args` reads, with its logical shape ((out, in) or (n,))."""
    h, q, kv, f = args.hidden_size, args.q_dim, args.kv_dim, args.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"tok_embd": (args.vocab_size, h)}
    for i in range(args.n_layers):
        p = f"layers.{i}."
        layer = {"attn_norm": (h,), "wq": (q, h), "wk": (kv, h), "wv": (kv, h), "wo": (h, q),
                 "ffn_norm": (h,), "w_gate": (f, h), "w_up": (f, h), "w_down": (h, f)}
        if args.attention_bias:
            layer.update(bq=(q,), bk=(kv,), bv=(kv,))
        if args.o_bias:
            layer.update(bo=(h,))
        if args.mlp_bias:
            layer.update(b_gate=(f,), b_up=(f,), b_down=(h,))
        if args.qk_norm:
            layer.update(q_norm=(args.head_dim,), k_norm=(args.head_dim,))
        if args.arch == "gemma3":
            layer.update(post_attn_norm=(h,), post_ffn_norm=(h,))
        shapes.update({p + k: v for k, v in layer.items()})
    shapes["out_norm"] = (h,)
    if not args.tie_embeddings:
        shapes["lm_head"] = (args.vocab_size, h)
    return shapes


def source_name(name: str, fmt: str, arch: str = "llama") -> str:
    """Program weight name -> tensor name in the file (fmt "hf" or "gguf")."""
    col = 0 if fmt == "hf" else 1
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name][col]
    _, i, key = name.split(".", 2)
    prefix = f"model.layers.{i}." if fmt == "hf" else f"blk.{i}."
    names = {**LAYER_NAMES, **GEMMA3_NAMES} if arch == "gemma3" else LAYER_NAMES
    return prefix + names[key][col]


def is_norm(name: str) -> bool:
    """A norm weight (Gemma stores these as w with the model computing x * (1 + w))."""
    return name == "out_norm" or name.endswith("norm")


def permute_rows(w, n_heads: int):
    """llama.cpp's convert_hf_to_gguf permute of q/k (rows or bias): each head's two halves
    interleaved into adjacent pairs, so GGUF llama files use the "pairs" rope layout."""
    shape = w.shape
    return w.reshape(n_heads, 2, shape[0] // n_heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)

"""Tensor names for both formats in one place: program weight name <-> HF safetensors <-> GGUF.

Program weight names (the keys of the weights dict and the Program's weight values):
  tok_embd, layers.{i}.attn_norm, wq, wk, wv, wo, bq, bk, bv, bo (biases), q_norm, k_norm (qwen3),
  ffn_norm, w_gate, w_up, w_down, b_gate, b_up, b_down (biases), out_norm, lm_head (absent when tied);
  an architecture adds its own (its Builder's EXTRA_NORMS) and overrides names (its record's
  layer_names: Gemma 3's post_attn_norm, post_ffn_norm).
"""

from __future__ import annotations

from vkdecode.models import ARCHITECTURES

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
GLOBAL_NAMES = {
    "tok_embd": ("model.embed_tokens.weight", "token_embd.weight"),
    "out_norm": ("model.norm.weight", "output_norm.weight"),
    "lm_head": ("lm_head.weight", "output.weight"),
}


def expected_shapes(args) -> dict[str, tuple[int, ...]]:
    """Every weight the program of `args` (a ModelArgs) reads, with its logical shape ((out, in) or (n,))."""
    return ARCHITECTURES[args.arch].builder.weight_shapes(args)


def source_name(name: str, fmt: str, arch: str = "llama") -> str:
    """Program weight name -> tensor name in the file (fmt "hf" or "gguf")."""
    col = 0 if fmt == "hf" else 1
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name][col]
    _, i, key = name.split(".", 2)
    prefix = f"model.layers.{i}." if fmt == "hf" else f"blk.{i}."
    names = {**LAYER_NAMES, **ARCHITECTURES[arch].layer_names}
    return prefix + names[key][col]


def is_norm(name: str) -> bool:
    """A norm weight (Gemma stores these as w with the model computing x * (1 + w))."""
    return name == "out_norm" or name.endswith("norm")


def permute_rows(w, n_heads: int):
    """llama.cpp's convert_hf_to_gguf permute of q/k (rows or bias): each head's two halves
    interleaved into adjacent pairs, so GGUF llama files use the "pairs" rope layout."""
    shape = w.shape
    return w.reshape(n_heads, 2, shape[0] // n_heads // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)

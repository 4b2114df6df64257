"""Qwen3-Next (HF `Qwen3NextForCausalLM`, model_type qwen3_next): Qwen3.5-MoE's predecessor, built
as qwen35moe.py's program (transformers' modeling_qwen3_next.py, exactly). What differs:

- a linear layer's projections are stored fused and interleaved per key-head group g (hk groups of
  r = hv / hk value heads): in_proj_qkvz rows [q_g (dk), k_g (dk), v_g (r dv), z_g (r dv)] and
  in_proj_ba rows [b_g (r), a_g (r)] (fix_query_key_value_ordering). Views regroup them at load
  into Qwen3.5's lin_qkv (every q, every k, every v: the conv's channel order), lin_z, lin_b and
  lin_a, so the kernels are Qwen3.5's;
- the MoE honours norm_topk_prob (default true), decoder_sparse_step and mlp_only_layers: a layer
  they leave dense runs a plain SwiGLU MLP of intermediate_size (no shared expert);
- a plain checkpoint (tensors under model.); its multi-token prediction heads (mtp.) are not read,
  as transformers does not load them.

The rest is Qwen3.5's: the gated RMSNorm (normed, times its weight as stored, times silu(z)), the
other norms' 1 + w, the conv (SiLU), A_log / dt_bias, q_proj's per-head [q, gate] halves, the
partial rotary (default 0.25 of head_dim) and the refusals (rope scaling, attention_bias). GGUF (llama.cpp's qwen3next): qwen35_gguf.py.
"""

from __future__ import annotations

import numpy as np

from vkdecode.errors import ModelError
from vkdecode.models import moe, qwen35, qwen35_gguf, qwen35moe
from vkdecode.models.arch import Architecture, HfView

QKVZ, BA = "linear_attn.in_proj_qkvz.weight", "linear_attn.in_proj_ba.weight"


def from_hf(cfg: dict, where: str) -> dict:
    # absent keys from hf_defaults only (a null norm_topk_prob is false, as in transformers)
    cfg, where = qwen35.text_config(cfg, where, ARCHITECTURE)
    return {**qwen35.read_text(cfg, where, ARCHITECTURE), **moe.hf_fields(cfg, where, shared=True)}


def regroup(group: tuple[int, ...], parts: tuple[int, ...]):
    """The view of a tensor of per-group rows, each group's laid out as `group` (its parts' sizes):
    the picked `parts` one after the other, each one's rows over every group in group order."""
    edges = np.cumsum((0,) + group)

    def view(a):
        g = a.reshape(-1, edges[-1], a.shape[-1])  # (groups, rows of a group, in)
        return np.concatenate([g[:, edges[p] : edges[p + 1]].reshape(-1, a.shape[-1]) for p in parts])

    return view


def hf_views(args) -> dict:
    hk, hv, dk, dv, _ = args.linear_attn
    r = hv // hk
    qkvz, ba = (dk, dk, r * dv, r * dv), (r, r)

    def fused(source: str, group: tuple[int, ...], parts: tuple[int, ...]) -> HfView:
        return HfView(source, lambda s: (hk * sum(group), s[1]), regroup(group, parts))

    return {
        **qwen35moe.hf_views(args),
        "lin_qkv": fused(QKVZ, qkvz, (0, 1, 2)),
        "lin_z": fused(QKVZ, qkvz, (3,)),
        "lin_b": fused(BA, ba, (0,)),
        "lin_a": fused(BA, ba, (1,)),
    }


def gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    return {
        **qwen35_gguf.text_fields(key, n_layers, hidden, heads, tiled=False),
        **qwen35_gguf.moe_fields(key, n_layers, hidden, heads),
    }


def gguf_views(args) -> dict:
    """llama.cpp's converter splits in_proj_qkvz into attn_qkv / attn_gate in the program's order
    and keeps in_proj_ba fused (ssm_ba); no V-head reorder (qwen35_gguf.py)."""
    return qwen35.gguf_views(args, tiled=False)


def check(args) -> None:
    qwen35.check(args)
    if not (args.n_experts and args.shared_expert_ffn):
        raise ModelError("qwen3_next needs experts and a shared expert")


ARCHITECTURE = Architecture(
    "qwen3_next",
    qwen35moe.Qwen35MoeBuilder,
    ("Qwen3NextForCausalLM",),
    ("qwen3_next",),
    qk_norm=True,
    from_hf=from_hf,
    gguf_name="qwen3next",
    gguf_fields=gguf_fields,
    gguf_views=gguf_views,
    gguf_implemented=qwen35moe.ARCHITECTURE.gguf_implemented,
    check=check,
    # Qwen3NextConfig's defaults where the shared readers would assume others
    hf_defaults={"num_key_value_heads": 2, "intermediate_size": 5632, "norm_topk_prob": True},
    layer_names={
        **qwen35moe.ARCHITECTURE.layer_names,
        "lin_qkv": (QKVZ, "attn_qkv.weight"),
        "lin_z": (QKVZ, "attn_gate.weight"),
        **{n: (BA, "ssm_ba.weight") for n in ("lin_b", "lin_a")},
    },
    hf_views=hf_views,
    hf_norms_plus_one=True,
    hf_other_parts=("mtp.",),  # the multi-token prediction heads
)

"""Qwen3.5 (text, dense: HF `Qwen3_5ForCausalLM`): Gated DeltaNet linear-attention layers between
gated full-attention ones (transformers' modeling_qwen3_5.py, exactly):

- a linear layer: rms_norm -> in_proj_qkv, in_proj_z, in_proj_b, in_proj_a -> conv1d_step (kernel
  4, SiLU) -> gated_delta_step (its state updated in place) -> per-head rms_norm (its weight as
  stored, not 1 + w) -> silu_mul with z -> out_proj -> residual add;
- a full layer: Qwen3's (q/k norms) with q_proj's rows per head split into q and an output gate:
  the attention output times sigmoid(gate) (sigmoid_scale) before o_proj; a partial rotary
  (partial_rotary_factor of head_dim) done by the plain rope op: q and k rows (and their norms) are
  permuted at load so each rotated pair (i, i + rotary / 2) sits at (i, i + head_dim / 2), and the
  pass-through pairs get frequency 0 (cos 1, sin 0: exact);
- every other RMSNorm holds w of x * (1 + w) (weights.py adds the 1).

Text positions are the same in the three MRoPE sections, so mrope_section changes nothing here.
The recurrent states read as zeros at position 0. Prompt chunks run the linear layers' rows in
order (whole chunks only); batched steps, speculative decode and a kept KV prefix are refused or
off for these models (the state cannot be rewound).
"""

from __future__ import annotations

import numpy as np

from vkdecode.errors import ModelError
from vkdecode.models import config_audit, qwen35_gguf, rope, settings
from vkdecode.models.arch import Architecture, HfView, hf_key, hf_sizes
from vkdecode.models.llama import Builder

LINEAR, FULL = qwen35_gguf.LINEAR, qwen35_gguf.FULL  # the layer types
OWN_KEYS = ("layer_types", "rope_parameters", "full_attention_interval", "partial_rotary_factor")
LINEAR_NAMES = {  # per-layer program name -> (HF suffix, GGUF suffix: qwen35_gguf.py reads them)
    "lin_qkv": ("linear_attn.in_proj_qkv.weight", "attn_qkv.weight"),
    "lin_z": ("linear_attn.in_proj_z.weight", "attn_gate.weight"),
    "lin_b": ("linear_attn.in_proj_b.weight", "ssm_beta.weight"),
    "lin_a": ("linear_attn.in_proj_a.weight", "ssm_alpha.weight"),
    "lin_conv": ("linear_attn.conv1d.weight", "ssm_conv1d.weight"),
    "lin_a_log": ("linear_attn.A_log", "ssm_a"),  # GGUF: -exp(A_log)
    "lin_dt_bias": ("linear_attn.dt_bias", "ssm_dt.bias"),
    "lin_norm_w": ("linear_attn.norm.weight", "ssm_norm.weight"),  # not *norm: weights.py adds no 1 to it
    "lin_out": ("linear_attn.out_proj.weight", "ssm_out.weight"),
    "wgate": ("self_attn.q_proj.weight", "attn_q.weight"),  # both: per-head [q, gate] rows
    "ffn_norm": ("post_attention_layernorm.weight", "post_attention_norm.weight"),
}


def text_config(cfg: dict, where: str, arch: Architecture) -> tuple[dict, str]:
    """The text model's config: a Qwen3_5*ForConditionalGeneration config's text_config (its top
    level's tied head wins, as in transformers), else the config itself; the keys it leaves out
    filled from arch.hf_defaults (transformers' config class defaults, not the shared readers')."""
    if isinstance(cfg.get("text_config"), dict):
        tie = cfg.get("tie_word_embeddings")
        cfg = {**cfg["text_config"], **({} if tie is None else {"tie_word_embeddings": tie})}
        where = f"{where} (text_config)"
    return {**arch.hf_defaults, **cfg}, where


def from_hf(cfg: dict, where: str) -> dict:
    """The ModelArgs fields of an HF Qwen3_5ForCausalLM config.json, or of the text model of a
    Qwen3_5ForConditionalGeneration one, with its own refusals."""
    return read_text(*text_config(cfg, where, ARCHITECTURE), ARCHITECTURE)


def read_text(cfg: dict, where: str, arch: Architecture) -> dict:
    """The fields Qwen3.5's text models share (the dense ones and qwen35moe.py's), refusals named
    after `arch`."""
    key = hf_key(cfg, where)
    n_layers = int(key("num_hidden_layers"))
    interval = cfg.get("full_attention_interval", 4)
    types = cfg.get("layer_types") or list(qwen35_gguf.interval_types(n_layers, interval))
    if not (isinstance(types, list) and all(t in (LINEAR, FULL) for t in types)):
        raise ModelError(f"{where}: key 'layer_types' must list {LINEAR!r} / {FULL!r}, not {types!r}")
    params = dict(settings.obj(cfg, "rope_parameters", where))
    # transformers' Qwen3.5 / Qwen3-Next configs: rope_parameters' factor, else the top level's, else 0.25
    factor = float(params.pop("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25)))
    for k in ("mrope_section", "mrope_interleaved"):  # text positions: equal in every section
        params.pop(k, None)
    rest = {k: v for k, v in cfg.items() if k not in OWN_KEYS}
    config_audit.audit_hf(rest, arch, where)
    if settings.flag(cfg, "attention_bias", False, where):
        raise ModelError(f"{where}: key 'attention_bias' = true is not supported for {arch.name}")
    if not settings.flag(cfg, "attn_output_gate", True, where):  # transformers always gates
        raise ModelError(f"{where}: key 'attn_output_gate' = false is not supported for {arch.name}")
    max_position = int(key("max_position_embeddings", 32768))
    theta, scaling = settings.hf_rope({**rest, "rope_parameters": params}, where, max_position)
    if scaling:
        raise ModelError(
            f"{where}: rope scaling {scaling.get('rope_type')!r} is not supported for {arch.name}"
        )
    head_dim = int(key("head_dim", 256))
    rotary = int(head_dim * factor)
    if not (0 < rotary <= head_dim and rotary % 2 == 0):
        raise ModelError(f"{where}: partial_rotary_factor {factor} gives {rotary} rotary dims of {head_dim}")
    lin = tuple(
        int(key(n))
        for n in (
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        )
    )
    if lin[1] % lin[0] or lin[4] < 2:
        raise ModelError(f"{where}: linear attention heads / kernel {lin} are not supported")
    return {
        **hf_sizes(cfg, where, head_dim=head_dim),
        "rope_theta": theta,
        "max_position": max_position,
        "tie_embeddings": settings.flag(cfg, "tie_word_embeddings", False, where),
        "qk_norm": True,
        "layer_types": tuple(types),
        "rotary_dim": rotary,
        "linear_attn": lin,
    }


def rotary_order(d: int, r: int) -> np.ndarray:
    """Head dims in the order the rope op rotates them as HF's partial rotary: new i and i + d / 2
    are HF's i and i + r / 2 for i < r / 2; the rest are the pass-through dims."""
    half, rest = r // 2, (d - r) // 2
    return np.concatenate(
        [np.arange(half), r + np.arange(rest), half + np.arange(half), r + rest + np.arange(rest)]
    )


def hf_views(args) -> dict:
    """The views of this model's HF tensors (q_proj split, rows permuted for the partial rotary)."""
    h, d, kvh = args.n_heads, args.head_dim, args.n_kv_heads
    order = rotary_order(d, args.rotary_dim)
    c = 2 * args.linear_attn[0] * args.linear_attn[2] + args.linear_attn[1] * args.linear_attn[3]

    def q_part(part: int, permute: bool):
        def view(a):
            a = a.reshape(h, 2, d, -1)[:, part]
            return (a[:, order] if permute else a).reshape(h * d, -1)

        return view

    def heads(n: int):
        return lambda a: a.reshape(n, d, -1)[:, order].reshape(n * d, -1)

    return {
        "wq": HfView("self_attn.q_proj.weight", lambda s: (2 * s[0], s[1]), q_part(0, True)),
        "wgate": HfView("self_attn.q_proj.weight", lambda s: (2 * s[0], s[1]), q_part(1, False)),
        "wk": HfView("self_attn.k_proj.weight", tuple, heads(kvh)),
        "q_norm": HfView("self_attn.q_norm.weight", tuple, lambda a: a[order]),
        "k_norm": HfView("self_attn.k_norm.weight", tuple, lambda a: a[order]),
        "lin_conv": HfView("linear_attn.conv1d.weight", lambda s: (c, 1, s[0] // c), lambda a: a.reshape(-1)),
    }


class Qwen35Builder(Builder):
    @classmethod
    def weight_shapes(cls, args) -> dict[str, tuple[int, ...]]:
        shapes = super().weight_shapes(args)
        h = args.hidden_size
        hk, hv, dk, dv, kk = args.linear_attn
        c = 2 * hk * dk + hv * dv
        for i, t in enumerate(args.layer_types):
            L = f"layers.{i}."
            if t == FULL:
                shapes[L + "wgate"] = (args.q_dim, h)
                continue
            for n in ("wq", "wk", "wv", "wo", "q_norm", "k_norm"):
                del shapes[L + n]
            shapes.update(
                {
                    L + "lin_qkv": (c, h),
                    L + "lin_z": (hv * dv, h),
                    L + "lin_b": (hv, h),
                    L + "lin_a": (hv, h),
                    L + "lin_conv": (c * kk,),
                    L + "lin_a_log": (hv,),
                    L + "lin_dt_bias": (hv,),
                    L + "lin_norm_w": (dv,),
                    L + "lin_out": (h, hv * dv),
                }
            )
        return shapes

    def rope_table(self, i: int) -> str:
        a = self.args
        freqs = rope.inv_freq(a.rope_theta, a.rotary_dim)
        table = np.zeros(a.head_dim // 2, np.float32)  # pass-through pairs: angle 0
        table[: a.rotary_dim // 2] = freqs
        return self.p.constant("rope_freqs", table)

    def attn_output(self, i: int, h: str, o: str) -> str:
        """The attention output times sigmoid of the gate half of q_proj."""
        L = f"layers.{i}."
        g = self.matmul(L + "attn_gate", L + "wgate", h)
        out = self.act(L + "attn_gated", self.args.q_dim)
        self.p.op("sigmoid_scale", [g, o], [out])
        return out

    def layer(self, i: int, x: str) -> str:
        if self.args.layer_types[i] == FULL:
            return super().layer(i, x)
        a, L = self.args, f"layers.{i}."
        hk, hv, dk, dv, kk = a.linear_attn
        c = 2 * hk * dk + hv * dv
        h = self.act(L + "attn_in", a.hidden_size)
        self.p.op("rms_norm", [x, L + "attn_norm"], [h], eps=a.rms_eps)
        qkv = self.matmul(L + "lin_qkv_out", L + "lin_qkv", h)
        z = self.matmul(L + "lin_z_out", L + "lin_z", h)
        gb = self.matmul(L + "lin_b_out", L + "lin_b", h)
        ga = self.matmul(L + "lin_a_out", L + "lin_a", h)
        conv = self.act(L + "lin_conv_out", c)
        hist = self.p.value(L + "conv_state", ((kk - 1) * c,), "f32", "state")
        self.p.op("conv1d_step", [qkv, L + "lin_conv", "step"], [conv, hist], kernel=kk)
        o = self.act(L + "lin_core", hv * dv)
        s = self.p.value(L + "delta_state", (hv * dk * dv,), "f32", "state")
        self.p.op(
            "gated_delta_step",
            [conv, ga, gb, L + "lin_a_log", L + "lin_dt_bias", "step"],
            [o, s],
            n_k_heads=hk,
            n_v_heads=hv,
            k_dim=dk,
            v_dim=dv,
            **({"v_tiled": 1} if a.v_heads_tiled else {}),  # the GGUF's order, kept (qwen35_gguf.py)
        )
        on = self.act(L + "lin_normed", hv * dv)
        self.p.op("rms_norm", [o, L + "lin_norm_w"], [on], eps=a.rms_eps)
        gated = self.act(L + "lin_gated", hv * dv)
        self.p.op("silu_mul", [z, on], [gated])
        out = self.matmul(L + "lin_out_out", L + "lin_out", gated)
        x1 = self.add(L + "x_mid", x, out, a.hidden_size)
        h2 = self.act(L + "ffn_in", a.hidden_size)
        self.p.op("rms_norm", [x1, L + "ffn_norm"], [h2], eps=a.rms_eps)
        return self.ffn_residual(i, x1, h2)


def gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    return qwen35_gguf.text_fields(key, n_layers, hidden, heads)


def gguf_views(args, tiled: bool = True) -> dict:
    """GGUF (llama.cpp's converter): qwen35_gguf.py; tiled False: Qwen3-Next's layout."""
    return qwen35_gguf.views(args, tiled, rotary_order(args.head_dim, args.rotary_dim))


def check(args) -> None:
    if len(args.linear_attn) != 5 or len(args.layer_types) != args.n_layers:
        raise ModelError(f"{args.arch} needs its linear attention sizes and a type for every layer")


ARCHITECTURE = Architecture(
    "qwen3_5",
    Qwen35Builder,
    ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration"),
    ("qwen3_5_text",),
    qk_norm=True,
    from_hf=from_hf,
    gguf_name="qwen35",
    gguf_fields=gguf_fields,
    gguf_views=gguf_views,
    gguf_implemented=frozenset({"rope.dimension_count"}),
    check=check,
    hf_defaults={"num_key_value_heads": 4},  # Qwen3_5TextConfig's (not all heads)
    layer_names=LINEAR_NAMES,
    hf_views=hf_views,
    hf_norms_plus_one=True,
    hf_text_prefix="model.language_model.",
    hf_other_parts=("model.visual.", "mtp."),  # the vision tower, the multi-token prediction heads
)

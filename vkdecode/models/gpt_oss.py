"""gpt-oss (HF `GptOssForCausalLM`, GGUF `gpt-oss`), as transformers' modeling_gpt_oss.py computes
it (and llama.cpp's gpt-oss for GGUF files): Llama's
layer with q/k/v/o biases, attention sinks (one learned logit per head in each softmax's
denominator), sliding-window layers (128 keys) alternating with full ones, YaRN rope (config_rope,
factor 32 untruncated by default), and a mixture of experts whose router has a bias, takes the top
k logits and softmaxes them (moe_topk with norm: the same weights), and whose experts carry biases
and a clamped GLU (swiglu_clamp): c = min(g, limit), y = c sigmoid(alpha c) (clamp(u, +-limit) + 1).

HF checkpoints stack the experts: gate_up_proj (experts, hidden, 2 x ffn) with gate and up
interleaved column by column, down_proj (experts, ffn, hidden), both stored input-major; HF_VIEWS
turns them into the program's (experts, out, in) weights at load. OpenAI's checkpoints store the
experts as MXFP4 blocks and scales (quantization_config mxfp4): hf_mxfp4.py keeps them as
mxfp4; other quantization_configs are refused by the config audit. A GGUF stores gate and
up apart, output-major, as llama.cpp's converter writes them; llama.cpp hard-codes the GLU's
constants and floors / ceils YaRN's ramp (transformers' truncate = false does not), so a GGUF runs
llama.cpp's math.
"""

from __future__ import annotations

from vkdecode.errors import ModelError
from vkdecode.models import config_audit, settings
from vkdecode.models.arch import Architecture, HfView, hf_key, hf_token_ids
from vkdecode.models.llama import Builder
from vkdecode.models.settings import FULL, SLIDING

# GptOssConfig's defaults where a config.json leaves a key out
DEFAULT_THETA = 150000.0
DEFAULT_ROPE = {
    "rope_type": "yarn",
    "factor": 32.0,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
    "original_max_position_embeddings": 4096,
}
# keys handled here, or that do not change a greedy decode (training losses, outputs asked for)
OWN_KEYS = ("sliding_window", "layer_types", "router_aux_loss_coef", "output_router_logits")


def _layer_types(cfg: dict, n_layers: int, where: str) -> tuple[str, ...]:
    types = cfg.get("layer_types")
    if types is None:  # GptOssConfig: even layers slide, odd ones see everything
        return tuple(SLIDING if (i + 1) % 2 else FULL for i in range(n_layers))
    if not (isinstance(types, list) and len(types) == n_layers and all(t in (SLIDING, FULL) for t in types)):
        raise ModelError(
            f"{where}: key 'layer_types' must list {SLIDING!r} / {FULL!r} per layer, not {types!r}"
        )
    return tuple(types)


def from_hf(cfg: dict, where: str) -> dict:
    """The ModelArgs fields of an HF GptOssForCausalLM config.json, with its own refusals."""
    key = hf_key(cfg, where)
    q = cfg.get("quantization_config")
    mx = isinstance(q, dict) and q.get("quant_method") == "mxfp4"  # the experts' blocks (hf_mxfp4.py)
    own = OWN_KEYS + (("quantization_config",) if mx else ())
    config_audit.audit_hf({k: v for k, v in cfg.items() if k not in own}, ARCHITECTURE, where)
    n_layers, heads = int(key("num_hidden_layers")), int(key("num_attention_heads", 64))
    types = _layer_types(cfg, n_layers, where)
    window = cfg.get("sliding_window", 128)
    if SLIDING in types and (type(window) is not int or window <= 0):
        raise ModelError(f"{where}: key 'sliding_window' must be a positive integer, not {window!r}")
    max_position = int(key("max_position_embeddings", 131072))
    if cfg.get("rope_parameters") is None and cfg.get("rope_scaling") is None:
        cfg = {**cfg, "rope_parameters": DEFAULT_ROPE}
    cfg = {**cfg, "rope_theta": cfg.get("rope_theta", DEFAULT_THETA)}
    theta, scaling = settings.hf_rope(cfg, where, max_position)
    n_experts, used = int(key("num_local_experts", 128)), int(key("num_experts_per_tok", 4))
    if not 0 < used <= n_experts:
        raise ModelError(f"{where}: key 'num_experts_per_tok' = {used} must be in 1..{n_experts}")
    limit = settings.number(key("swiglu_limit", 7.0), "swiglu_limit", where)
    if not limit > 0:
        raise ModelError(f"{where}: key 'swiglu_limit' = {limit} must be positive")
    bias = settings.flag(cfg, "attention_bias", True, where)
    bos, eos_ids = hf_token_ids(cfg, where)
    ffn = int(key("intermediate_size", 2880))
    hidden = int(key("hidden_size", 2880))
    return {
        "vocab_size": int(key("vocab_size")),
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "n_layers": n_layers,
        "n_heads": heads,
        "n_kv_heads": int(key("num_key_value_heads", heads)),
        "head_dim": int(key("head_dim", hidden // heads)),
        "rms_eps": settings.number(key("rms_norm_eps", 1e-5), "rms_norm_eps", where),
        "rope_theta": theta,
        "rope_scaling": scaling,
        "max_position": max_position,
        "tie_embeddings": settings.flag(cfg, "tie_word_embeddings", False, where),
        "attention_bias": bias,
        "o_bias": bias,
        "bos_id": bos,
        "eos_ids": eos_ids,
        "sliding_window": window if SLIDING in types else 0,
        "layer_types": types,
        "rope_local_theta": theta,
        "n_experts": n_experts,
        "n_experts_used": used,
        "expert_ffn": ffn,
        "norm_topk_prob": True,  # softmax over the top k logits = the top k of the softmax, renormalised
        "swiglu_alpha": settings.number(key("swiglu_alpha", 1.702), "swiglu_alpha", where),
        "swiglu_limit": limit,
    }


class GptOssBuilder(Builder):
    @classmethod
    def weight_shapes(cls, args) -> dict[str, tuple[int, ...]]:
        shapes = super().weight_shapes(args)
        shapes.update({f"layers.{i}.sinks": (args.n_heads,) for i in range(args.n_layers)})
        return shapes

    @classmethod
    def ffn_shapes(cls, args, i: int) -> dict[str, tuple[int, ...]]:
        h, e, f = args.hidden_size, args.n_experts, args.expert_ffn
        return {
            "router": (e, h),
            "router_b": (e,),
            "exp_gate": (e, f, h),
            "exp_up": (e, f, h),
            "exp_down": (e, h, f),
            "exp_gate_b": (e, f),
            "exp_up_b": (e, f),
            "exp_down_b": (e, h),
        }

    def window(self, i: int) -> int:
        return self.args.sliding_window if self.args.layer_types[i] == SLIDING else 0

    def attn_sinks(self, i: int) -> list[str]:
        return [f"layers.{i}.sinks"]

    def ffn(self, i: int, h2: str) -> str:
        a, L = self.args, f"layers.{i}."
        k, f, h = a.n_experts_used, a.expert_ffn, a.hidden_size
        logits = self.add(
            L + "router_logits_b",
            self.matmul(L + "router_logits", L + "router", h2),
            L + "router_b",
            a.n_experts,
        )
        ids = self.p.value(L + "expert_ids", (k,), "u32")
        weights = self.act(L + "expert_weights", k)
        self.p.op("moe_topk", [logits], [ids, weights], k=k, n_experts=a.n_experts, norm=True)

        def expert(name: str, w: str, x: str, n: int) -> str:
            y = self.act(L + name, k * n)
            self.p.op("moe_matmul", [L + w, x, ids], [y])
            yb = self.act(L + name + "_b", k * n)
            self.p.op("moe_bias", [y, L + w + "_b", ids], [yb])
            return yb

        g, u = expert("exp_g", "exp_gate", h2, f), expert("exp_u", "exp_up", h2, f)
        act = self.act(L + "exp_act", k * f)
        self.p.op("swiglu_clamp", [g, u], [act], alpha=a.swiglu_alpha, limit=a.swiglu_limit)
        d = expert("exp_out", "exp_down", act, h)
        out = self.act(L + "experts_out", h)
        self.p.op("moe_sum", [d, weights], [out])
        return out


def _gate_up(half: int):
    """gate_up_proj (experts, hidden, 2 ffn), gate and up interleaved by column -> one of them as
    (experts, ffn, hidden); its bias (experts, 2 ffn) -> (experts, ffn)."""

    def view(a):
        return a[..., half::2].swapaxes(-1, -2) if a.ndim == 3 else a[..., half::2]

    return view


def _interleaved(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[2], 2 * shape[1]) if len(shape) == 3 else (shape[0], 2 * shape[1])


HF_VIEWS = {
    # program name -> its HF view; LAYER_NAMES has the GGUF names (plain tensors there)
    "exp_gate": HfView("mlp.experts.gate_up_proj", _interleaved, _gate_up(0), mxfp4=(2, 0)),
    "exp_up": HfView("mlp.experts.gate_up_proj", _interleaved, _gate_up(1), mxfp4=(2, 1)),
    "exp_gate_b": HfView("mlp.experts.gate_up_proj_bias", _interleaved, _gate_up(0)),
    "exp_up_b": HfView("mlp.experts.gate_up_proj_bias", _interleaved, _gate_up(1)),
    "exp_down": HfView(
        "mlp.experts.down_proj", lambda s: (s[0], s[2], s[1]), lambda a: a.swapaxes(-1, -2), mxfp4=(1, 0)
    ),
    "exp_down_b": HfView("mlp.experts.down_proj_bias", tuple, lambda a: a),
}
GGUF_EXPERTS = {"exp_gate": "ffn_gate_exps", "exp_up": "ffn_up_exps", "exp_down": "ffn_down_exps"}
LAYER_NAMES = {
    "ffn_norm": ("post_attention_layernorm.weight", "post_attention_norm.weight"),
    "router": ("mlp.router.weight", "ffn_gate_inp.weight"),
    "router_b": ("mlp.router.bias", "ffn_gate_inp.bias"),
    "sinks": ("self_attn.sinks", "attn_sinks.weight"),
    **{name: (HF_VIEWS[name].source, g + ".weight") for name, g in GGUF_EXPERTS.items()},
    **{name + "_b": (HF_VIEWS[name + "_b"].source, g + ".bias") for name, g in GGUF_EXPERTS.items()},
}


LLAMA_CPP_GLU = {"swiglu_alpha": 1.702, "swiglu_limit": 7.0}  # llama.cpp's gpt-oss hard-codes them


def gguf_fields(key, n_layers: int, hidden: int, heads: int) -> dict:
    """llama.cpp's gpt-oss: every layer MoE, even layers sliding (set_swa_pattern(2)), softmax over
    the chosen experts' logits."""
    n, used = int(key("expert_count")), int(key("expert_used_count"))
    if not 0 < used <= n:
        raise ModelError(f"expert_used_count {used} must be in 1..{n} (expert_count)")
    return {
        "sliding_window": int(key("attention.sliding_window", 128)),
        "layer_types": tuple(SLIDING if i % 2 == 0 else FULL for i in range(n_layers)),
        "rope_local_theta": float(key("rope.freq_base", DEFAULT_THETA)),
        "n_experts": n,
        "n_experts_used": used,
        "expert_ffn": int(key("expert_feed_forward_length")),
        "norm_topk_prob": True,
        **LLAMA_CPP_GLU,
    }


def tokenizer_defaults(tokenizer) -> None:
    """Harmony's ends of an assistant turn stop the generation: <|return|> (the answer is done)
    and <|call|> (a tool call). <|end|> ends a message only, the analysis before the final answer:
    it must not stop, though a GGUF may name it (llama.cpp drops it from its end tokens the same
    way). The HF files' generation_config lists <|return|> and <|call|>, the GGUF only its EOS."""
    ids = {name: tokenizer.tok.token_to_id(name) for name in ("<|return|>", "<|call|>", "<|end|>")}
    if ids["<|return|>"] is None or ids["<|call|>"] is None:
        return  # not the harmony vocabulary: keep the file's own
    tokenizer.eos_ids |= {ids["<|return|>"], ids["<|call|>"]}
    tokenizer.eos_ids.discard(ids["<|end|>"])


ARCHITECTURE = Architecture(
    "gpt-oss",  # llama.cpp's name (GGUF general.architecture and key prefix)
    GptOssBuilder,
    ("GptOssForCausalLM",),
    ("gpt_oss",),
    from_hf=from_hf,
    gguf_fields=gguf_fields,
    gguf_implemented=frozenset({"attention.sliding_window", "expert_count", "expert_used_count"}),
    layer_names=LAYER_NAMES,
    hf_views=HF_VIEWS,
    tokenizer_defaults=tokenizer_defaults,
    # on the tensor cores with its sinks (attention_rows_coop SINKS); x rows scaled into f16's range
    # like Gemma's, as gpt-oss's activations (trained in bf16) are unmeasured here
    coop_row_scale=True,
)

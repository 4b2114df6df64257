"""Which spelling of a math-changing setting wins: the one place that decides it, reading a config
the way its reference implementation does (transformers 5 for an HF config.json, llama.cpp for
GGUF metadata). Where two spellings are both present and disagree, the reference's precedence
decides when it is certain (the same in every transformers 5 release); otherwise the model is
refused with a ModelError naming both keys. What one rope dict means is config_rope.py's; the
keys nothing implements are refused in config_audit.py.

HF config.json, as transformers 5 reads it:
  rope, one table (Llama, Qwen)  a non-empty rope_scaling (v4) replaces rope_parameters (v5) whole;
                                 in the dict used, its rope_theta > top-level rope_theta > 10000,
                                 rope_type > type > "default", llama3's and yarn's
                                 original_max_position_embeddings > max_position_embeddings
  rope per layer type (Gemma 3)  rope_parameters.{full,sliding}_attention; a base missing there
                                 comes from rope_theta / rope_local_base_freq, else 1e6 / 1e4; a
                                 v4 rope_scaling updates full_attention. Refused (releases differ):
                                 a flat rope_parameters, one beside rope_scaling, a rope_scaling
                                 spelling its type `type` only
  tied lm_head                   tie_word_embeddings (default per architecture), except that a
                                 stored lm_head.weight is kept (stored_head)
  sizes                          head_dim, num_key_value_heads, max_position_embeddings: absent
                                 ones take the architecture's transformers default (hf_default)
GGUF, as llama.cpp reads it:
  linear rope scaling            rope.scaling.type (absent: linear; none: off); its factor
                                 rope.scaling.factor > rope.scale_linear; 0 or 1: off. Refused
                                 beside a rope_freqs tensor (llama.cpp would apply both)
  yarn rope scaling              rope.scaling.type = yarn; original context
                                 rope.scaling.original_context_length > context_length
"""

from __future__ import annotations

from dataclasses import replace

from vkdecode.errors import ModelError
from vkdecode.models.config_rope import rope_scaling

FULL, SLIDING = "full_attention", "sliding_attention"
LAYER_KINDS = (FULL, SLIDING)


def number(value, key: str, where: str) -> float:
    """A JSON number (not a bool, a string or null), as float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelError(f"{where}: key {key!r} must be a number, not {value!r}")
    return float(value)


def flag(cfg: dict, key: str, default: bool, where: str) -> bool:
    """A JSON true / false; null or absent: default. A string "false" is not silently true."""
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ModelError(f"{where}: key {key!r} must be true or false, not {v!r}")
    return v


def obj(cfg: dict, key: str, where: str) -> dict:
    """An object-valued key; null or absent: {}."""
    v = cfg.get(key)
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ModelError(f"{where}: key {key!r} must be an object, not {v!r}")
    return v


def hf_default(cfg: dict, arch, key: str, fallback):
    """cfg[key], else the architecture's transformers default (Architecture.hf_defaults), else
    fallback (Qwen3's head_dim is 128 and Qwen's num_key_value_heads 32, not the Llama values)."""
    v = cfg.get(key)
    return v if v is not None else arch.hf_defaults.get(key, fallback)


def _base(d: dict, key: str, cfg: dict, top: str, default: float, where: str) -> float:
    """transformers' setdefault: the base inside the rope dict, else the top-level key, else the
    default. A key present with null is not a default (transformers would fail on it)."""
    if "rope_theta" in d:
        return number(d["rope_theta"], f"{key}.rope_theta", where)
    if top in cfg:
        return number(cfg[top], top, where)
    return default


def _original_context(d: dict, key: str, cfg: dict, max_position: int, where: str) -> dict:
    """llama3's and yarn's original_max_position_embeddings: inside the dict, else
    max_position_embeddings (transformers' standardize_rope_params). A top-level one is read by
    some models (Phi-3) and ignored by these: refused where it would change the table."""
    if d.get("rope_type", d.get("type")) not in ("llama3", "yarn"):
        return d
    inner = d.get("original_max_position_embeddings", max_position)
    top = cfg.get("original_max_position_embeddings")
    if top is not None and top != inner:
        name = (
            f"{key}.original_max_position_embeddings"
            if "original_max_position_embeddings" in d
            else "max_position_embeddings"
        )
        raise ModelError(
            f"{where}: keys 'original_max_position_embeddings' = {top!r} and {name!r} = {inner!r} "
            "disagree (transformers reads the second for this architecture, other models the "
            "first): keep one"
        )
    return {**d, "original_max_position_embeddings": inner}


def _no_partial(dicts, where: str) -> None:
    """(key prefix, dict) pairs: a partial_rotary_factor other than 1 in any is refused."""
    for prefix, d in dicts:
        f, key = d.get("partial_rotary_factor"), prefix + "partial_rotary_factor"
        if f is not None and number(f, key, where) != 1.0:
            raise ModelError(f"{where}: key {key!r} = {f!r} (partial rotary embedding) is not supported")


def hf_rope(cfg: dict, where: str, max_position: int) -> tuple[float, dict | None]:
    """One rope for every layer (Llama, Qwen) -> (base, normalised scaling or None)."""
    params, scaling = obj(cfg, "rope_parameters", where), obj(cfg, "rope_scaling", where)
    for key, d in (("rope_parameters", params), ("rope_scaling", scaling)):
        nested = [k for k in LAYER_KINDS if k in d]
        if nested:  # transformers ignores it (Llama) or fails on it (Qwen)
            raise ModelError(
                f"{where}: key '{key}.{nested[0]}': rope parameters per layer type, but this "
                "architecture has one rope for every layer"
            )
    # transformers 5: `rope_parameters = rope_scaling or rope_parameters`, then setdefault's
    key, d = ("rope_scaling", scaling) if scaling else ("rope_parameters", params)
    theta = _base(d, key, cfg, "rope_theta", 10000.0, where)
    return theta, rope_scaling(_original_context(d, key, cfg, max_position, where), where, key)


def hf_rope_per_layer(cfg: dict, where: str, max_position: int) -> tuple[float, dict | None, float]:
    """Gemma 3's rope per layer type -> (global base, global scaling, sliding base), as
    Gemma3TextConfig.convert_rope_params_to_dict builds rope_parameters."""
    params, scaling = obj(cfg, "rope_parameters", where), obj(cfg, "rope_scaling", where)
    flat = sorted(k for k in params if k not in LAYER_KINDS)
    if flat:  # 5.x releases ignore such keys or merge them into full_attention
        raise ModelError(
            f"{where}: key 'rope_parameters' holds {', '.join(map(repr, flat))} beside or instead of "
            f"one object per layer type ({FULL!r}, {SLIDING!r}); transformers 5 releases read a flat "
            "rope_parameters differently for gemma3: give it per layer type"
        )
    # 5.x releases apply rope_scaling over full_attention, or drop it; 5.24 updates a
    # full_attention entry that must be there (else KeyError), even with an empty rope_scaling
    both = cfg.get("rope_parameters") is not None and cfg.get("rope_scaling") is not None
    if both and (scaling or FULL not in params):
        raise ModelError(
            f"{where}: keys 'rope_parameters' (per layer type) and 'rope_scaling' are both given and "
            "transformers 5 releases differ on how they combine: give the scaling in "
            f"'rope_parameters.{FULL}' only"
        )
    subs = {}
    for kind in LAYER_KINDS:
        sub = params.get(kind)
        if sub is not None and not isinstance(sub, dict):
            raise ModelError(f"{where}: key 'rope_parameters.{kind}' must be an object, not {sub!r}")
        subs[kind] = dict(sub or {})
    full_key, local_key = f"rope_parameters.{FULL}", f"rope_parameters.{SLIDING}"
    if scaling:  # v4: rope_scaling applies to the global layers, over a default-type dict
        if "rope_type" not in scaling and "type" in scaling:
            raise ModelError(
                f"{where}: key 'rope_scaling' names its type as 'type' = {scaling['type']!r} only: "
                "transformers 5 keeps the default rope for gemma3 then (4.x scaled it); "
                "spell it 'rope_type'"
            )
        subs[FULL] = {"rope_type": "default", **scaling}
        full_key = "rope_scaling"
    full, local = subs[FULL], subs[SLIDING]
    _no_partial(((full_key + ".", full), (local_key + ".", local), ("", cfg)), where)
    if rope_scaling(_original_context(local, local_key, cfg, max_position, where), where, local_key):
        raise ModelError(f"{where}: rope scaling on sliding layers (key {local_key!r}) is not supported")
    return (
        _base(full, full_key, cfg, "rope_theta", 1e6, where),
        rope_scaling(_original_context(full, full_key, cfg, max_position, where), where, full_key),
        _base(local, local_key, cfg, "rope_local_base_freq", 1e4, where),
    )


def stored_head(args, tensor_names):
    """args with the checkpoint's lm_head: transformers 5 does not tie a head the checkpoint stores
    (when it differs from the embedding it keeps it and warns; when equal, either reading is the
    same math), so tie_word_embeddings = true beside a stored lm_head.weight means an untied head."""
    if args.tie_embeddings and "lm_head.weight" in tensor_names:
        return replace(args, tie_embeddings=False)
    return args


def gguf_rope(field, arch: str, path: str, has_factors: bool) -> dict | None:
    """Linear rope scaling from GGUF metadata as llama.cpp reads it (llama_model::load_hparams and
    the context's `never scale if scaling type is none`); None when it does not scale. Other
    types are refused. (Llama 3's scaling comes as the rope_freqs.weight tensor instead.)"""
    type_key, factor_key, legacy_key = (
        f"{arch}.rope.scaling.type",
        f"{arch}.rope.scaling.factor",
        f"{arch}.rope.scale_linear",
    )
    kind = field(type_key)
    if kind not in (None, "none", "linear", "yarn"):
        raise ModelError(
            f"{path}: rope scaling {kind!r} (key {type_key!r}) is not supported "
            "(supported: none, linear, yarn, and llama.cpp's rope_freqs tensor)"
        )
    factor, key = field(factor_key), factor_key
    if factor is None:  # llama.cpp's old key name, read only when the new one is absent
        factor, key = field(legacy_key), legacy_key
    factor = 0.0 if factor is None else number(factor, key, path)
    if kind == "yarn":
        return _gguf_yarn(field, arch, path, factor, has_factors)
    if kind == "none" or factor in (0.0, 1.0):
        return None
    if factor < 0:
        raise ModelError(f"{path}: key {key!r} = {factor} must be positive")
    if has_factors:
        raise ModelError(
            f"{path}: key {key!r} = {factor} (linear rope scaling) beside the rope_freqs.weight tensor: "
            "llama.cpp applies both, vkdecode builds one or the other"
        )
    return {"rope_type": "linear", "factor": factor}


# llama.cpp's YaRN knobs beyond factor, original context and betas, at the values that leave its
# math as transformers' (ext_factor -1 means 1 for yarn; log_multiplier is DeepSeek's mscale)
GGUF_YARN_NEUTRAL = {
    "yarn_ext_factor": (-1.0, 1.0),
    "yarn_attn_factor": (1.0,),
    "yarn_log_multiplier": (0.0,),
}


def _gguf_yarn(field, arch: str, path: str, factor: float, has_factors: bool) -> dict:
    """YaRN as llama.cpp runs it: the ramp's ends always floored / ceiled, the original context
    rope.scaling.original_context_length (else context_length), betas 32 / 1 unless given, and cos /
    sin times 1 + 0.1 ln(factor)."""
    pre = f"{arch}.rope.scaling."
    for name, neutral in GGUF_YARN_NEUTRAL.items():
        v = field(pre + name)
        if v is not None and float(v) not in neutral:
            raise ModelError(f"{path}: key {pre + name!r} = {v!r} is not supported")
    if factor < 1 or has_factors:
        raise ModelError(
            f"{path}: yarn rope scaling needs key {pre + 'factor'!r} >= 1 and no rope_freqs tensor"
        )
    ctx_key = pre + "original_context_length"
    ctx = field(ctx_key)
    if ctx is None:
        ctx_key, ctx = f"{arch}.context_length", field(f"{arch}.context_length")
    out = {"rope_type": "yarn", "factor": factor, "truncate": True}
    out["original_max_position_embeddings"] = number(ctx, ctx_key, path)
    for name, default in (("beta_fast", 32.0), ("beta_slow", 1.0)):
        v = field(pre + "yarn_" + name)
        out[name] = default if v is None else number(v, pre + "yarn_" + name, path)
    if min(out["original_max_position_embeddings"], out["beta_fast"], out["beta_slow"]) <= 0:
        raise ModelError(f"{path}: yarn rope scaling has out-of-range values {out}")
    return out

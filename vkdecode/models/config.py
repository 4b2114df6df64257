"""ModelArgs: the few numbers a decode Program needs, read from an HF config.json or GGUF metadata.

Anything we cannot run exactly (dynamic / longrope rope scaling, logit soft-capping, ...) is refused
with a ModelError instead of being ignored, because ignoring it gives plausible but wrong tokens;
the audit of such keys lives in config_audit.py. What differs per architecture is asked of its
Architecture record (models/arch.py; Gemma 3 brings its own HF reader).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from vkdecode.errors import ModelError
from vkdecode.models import ARCHITECTURES, config_audit, settings
from vkdecode.models.arch import Architecture, hf_key, hf_token_ids
from vkdecode.models.config_rope import gguf_rope_factors

ARCHS = tuple(ARCHITECTURES)
# HF `architectures` entries and `model_type` values -> the architecture
GGUF_ARCHS = {a.gguf_name or a.name: a for a in ARCHITECTURES.values()}
HF_ARCHS = {c: a for a in ARCHITECTURES.values() for c in a.hf_classes}
HF_MODEL_TYPES = {t: a for a in ARCHITECTURES.values() for t in a.hf_model_types}


@dataclass
class ModelArgs:
    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    max_position: int
    tie_embeddings: bool
    attention_bias: bool = False  # q/k/v projection biases
    o_bias: bool = False  # o-projection bias (Llama / Qwen3 `attention_bias`; not Qwen2)
    mlp_bias: bool = False  # gate/up/down biases (Llama `mlp_bias`)
    qk_norm: bool = False
    rope_layout: str = "neox"  # "pairs" for GGUF llama (converter permuted q/k rows)
    bos_id: int | None = None
    eos_ids: list[int] = field(default_factory=list)
    # rope: a normalised scaling dict ({"rope_type": "llama3" | "linear", ...}) or llama.cpp's
    # per-frequency divisors (GGUF `rope_freqs.weight`); vkdecode/models/rope.py builds the table
    rope_scaling: dict | None = None
    rope_freq_factors: tuple[float, ...] | None = None
    # Gemma 3 (gemma3.py): GeGLU, sandwich norms, scaled embeddings, sliding-window layers
    hidden_act: str = "silu"  # "silu" or "gelu_tanh"
    sliding_window: int = 0  # keys a sliding layer sees (itself included)
    layer_types: tuple[str, ...] = ()  # per layer "sliding_attention" | "full_attention"
    rope_local_theta: float = 0.0  # rope base of the sliding layers
    query_pre_attn_scalar: float = 0.0  # attention scale = this ** -0.5 (0: head_dim)
    # mixture of experts (models/moe.py): layer i's FFN is n_experts SwiGLU experts of expert_ffn
    # rows, n_experts_used of them per token (their router weights renormalised if norm_topk_prob),
    # unless i is one of dense_layers (a plain MLP of intermediate_size)
    n_experts: int = 0
    n_experts_used: int = 0
    expert_ffn: int = 0
    norm_topk_prob: bool = False
    dense_layers: tuple[int, ...] = ()
    shared_expert_ffn: int = 0  # Qwen2-MoE's gated shared expert (0: none)
    # gpt-oss's experts (gpt_oss.py): the clamped GLU's alpha and limit
    swiglu_alpha: float = 0.0
    swiglu_limit: float = 0.0
    # Qwen3.5 (qwen35.py): rope on the first rotary_dim dims of a head (0: all), and its linear
    # attention layers' (key heads, value heads, key dim, value dim, conv kernel)
    rotary_dim: int = 0
    linear_attn: tuple[int, ...] = ()
    # and whether their V heads are in llama.cpp's GGUF order (tiled over the key heads, qwen35_gguf.py)
    v_heads_tiled: bool = False

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ModelError(f"unknown architecture {self.arch!r} (supported: {', '.join(ARCHS)})")
        sizes = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "max_position",
        )
        for name in sizes:  # a corrupt header must not reach a division or a huge loop
            if not 0 < getattr(self, name) < 1 << 31:
                raise ModelError(f"{name} = {getattr(self, name)} is out of range")
        if self.n_heads % self.n_kv_heads:
            raise ModelError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ModelError(f"head_dim {self.head_dim} is odd (rope rotates pairs)")
        for name in ("rope_theta",) + (
            ("rope_local_theta",) if "sliding_attention" in self.layer_types else ()
        ):
            if not 0 < getattr(self, name) < float("inf"):  # 0 or inf would make a table of inf / nan
                raise ModelError(f"{name} = {getattr(self, name)} is out of range")
        if self.rope_freq_factors is not None and len(self.rope_freq_factors) != self.head_dim // 2:
            raise ModelError(
                f"rope_freqs has {len(self.rope_freq_factors)} entries, expected {self.head_dim // 2}"
            )
        if self.layer_types and len(self.layer_types) != self.n_layers:
            raise ModelError(
                f"layer_types lists {len(self.layer_types)} layers, the model has {self.n_layers}"
            )
        if "sliding_attention" in self.layer_types and not 0 < self.sliding_window < 1 << 31:
            raise ModelError(f"sliding_window = {self.sliding_window} is out of range")
        if ARCHITECTURES[self.arch].check is not None:
            ARCHITECTURES[self.arch].check(self)
        if self.rope_freq_factors is not None and not all(f > 0 for f in self.rope_freq_factors):
            raise ModelError("rope_freqs holds a factor that is not positive")

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @classmethod
    def from_hf_config(cls, path_or_dict) -> ModelArgs:
        where = "config.json"
        if isinstance(path_or_dict, dict):
            cfg = path_or_dict
        else:
            where = str(path_or_dict)
            if os.path.isdir(where):
                where = os.path.join(where, "config.json")
            try:
                with open(where, encoding="utf-8") as f:
                    cfg = json.load(f)
            except FileNotFoundError:
                raise ModelError(f"{where}: no such file (an HF model directory needs config.json)") from None
            except (OSError, json.JSONDecodeError) as e:
                raise ModelError(f"{where}: cannot read config: {e}") from None
        if not isinstance(cfg, dict):
            raise ModelError(f"{where}: not a model config (a JSON {type(cfg).__name__}, not an object)")
        return _checked(where, _from_hf, cfg, where)

    @classmethod
    def from_gguf(cls, reader, path) -> ModelArgs:
        return _checked(str(path), _from_gguf, reader, str(path))


def _hf_arch(cfg: dict, where: str) -> Architecture:
    archs = cfg.get("architectures") or []
    if not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
        raise ModelError(f"{where}: key 'architectures' must be a list of names, not {archs!r}")
    for a in archs:
        if a in HF_ARCHS:
            return HF_ARCHS[a]
    if not archs and cfg.get("model_type") in HF_MODEL_TYPES:
        return HF_MODEL_TYPES[cfg["model_type"]]
    name = archs[0] if archs else cfg.get("model_type")
    raise ModelError(
        f"{where}: unknown architecture {name!r} in key 'architectures' (supported: {', '.join(HF_ARCHS)})"
    )


def _from_hf(cfg: dict, where: str) -> ModelArgs:
    arch = _hf_arch(cfg, where)
    key = hf_key(cfg, where)

    if arch.from_hf is not None:  # its own reader and refusals (gemma3.py)
        return ModelArgs(arch=arch.name, **arch.from_hf(cfg, where))
    config_audit.audit_hf(cfg, arch, where)
    hidden, heads = int(key("hidden_size")), int(key("num_attention_heads"))
    bos, eos_ids = hf_token_ids(cfg, where)
    max_position = int(settings.hf_default(cfg, arch, "max_position_embeddings", 2048))
    theta, scaling = settings.hf_rope(cfg, where, max_position)
    bias = settings.flag(cfg, "attention_bias", False, where)
    return ModelArgs(
        arch=arch.name,
        vocab_size=int(key("vocab_size")),
        hidden_size=hidden,
        intermediate_size=int(key("intermediate_size")),
        n_layers=int(key("num_hidden_layers")),
        n_heads=heads,
        n_kv_heads=int(settings.hf_default(cfg, arch, "num_key_value_heads", heads)),
        head_dim=int(settings.hf_default(cfg, arch, "head_dim", hidden // heads)),
        rms_eps=settings.number(key("rms_norm_eps", 1e-6), "rms_norm_eps", where),
        rope_theta=theta,
        rope_scaling=scaling,
        max_position=max_position,
        # transformers' default; settings.stored_head unties it where the checkpoint has a head
        tie_embeddings=settings.flag(cfg, "tie_word_embeddings", False, where),
        # q/k/v(/o) biases when `attention_bias` is true, or always (Qwen2: never o); `mlp_bias`
        # where the architecture reads it (Llama)
        attention_bias=arch.qkv_bias or bias,
        o_bias=arch.hf_o_bias and bias,
        mlp_bias=arch.mlp_bias and settings.flag(cfg, "mlp_bias", False, where),
        qk_norm=arch.qk_norm,
        rope_layout="neox",
        bos_id=bos,
        eos_ids=eos_ids,
        **(arch.hf_fields(cfg, where) if arch.hf_fields else {}),
    )


def _gguf_field(reader, name, path: str = ""):
    """A metadata value; a corrupt one (bad UTF-8, wrong type) is a ModelError naming the key."""
    f = reader.fields.get(name)
    try:
        return None if f is None else f.contents()
    except (ValueError, IndexError, TypeError) as e:  # UnicodeDecodeError is a ValueError
        raise ModelError(f"{path}: key {name!r} cannot be read ({type(e).__name__}: {e})") from None


def _checked(where: str, build, *a) -> ModelArgs:
    """build(*a), where a string or list in place of a number (a corrupt or odd header) or a
    size out of range becomes a ModelError naming the file."""
    try:
        return build(*a)
    except ModelError as e:
        if str(e).startswith(where):
            raise
        raise ModelError(f"{where}: {e}") from None
    except (TypeError, ValueError, ArithmeticError) as e:  # ArithmeticError: a head count of 0
        raise ModelError(
            f"{where}: a config value has the wrong type or is 0 ({type(e).__name__}: {e})"
        ) from None


def _from_gguf(reader, path: str) -> ModelArgs:
    arch = _gguf_field(reader, "general.architecture", path)
    if arch is None:
        raise ModelError(f"{path}: missing key 'general.architecture'")
    if arch not in GGUF_ARCHS:
        raise ModelError(
            f"{path}: unknown architecture {arch!r} in key 'general.architecture' "
            f"(supported: {', '.join(GGUF_ARCHS)})"
        )
    spec = GGUF_ARCHS[arch]  # arch: llama.cpp's name, the key prefix

    def key(name, default=None):
        v = _gguf_field(reader, f"{arch}.{name}", path)
        if v is None:
            if default is None:
                raise ModelError(f"{path}: missing key '{arch}.{name}'")
            return default
        return v

    names = {t.name for t in reader.tensors}
    factors = gguf_rope_factors(reader, path)
    scaling = settings.gguf_rope(lambda k: _gguf_field(reader, k, path), arch, path, factors is not None)
    config_audit.audit_gguf(lambda name: _gguf_field(reader, name, path), arch, path, spec.gguf_implemented)
    hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
    vocab = _gguf_field(reader, f"{arch}.vocab_size", path)
    if vocab is None:
        tokens = reader.fields.get("tokenizer.ggml.tokens")
        vocab = len(tokens.data) if tokens is not None else None
    if vocab is None:
        emb = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
        vocab = int(emb.shape[1]) if emb is not None else 0
    eos = _gguf_field(reader, "tokenizer.ggml.eos_token_id", path)
    extra = spec.gguf_fields(key, int(key("block_count")), hidden, heads) if spec.gguf_fields else {}
    # an architecture's fields win (Qwen3.5: its multi-token prediction layers left out of
    # n_layers; Qwen3.5-MoE: no dense FFN, so no feed_forward_length)
    ffn = extra.pop("intermediate_size", None) or int(key("feed_forward_length"))
    return ModelArgs(
        arch=spec.name,
        vocab_size=int(vocab),
        hidden_size=hidden,
        intermediate_size=ffn,
        n_layers=extra.pop("n_layers", None) or int(key("block_count")),
        n_heads=heads,
        n_kv_heads=int(key("attention.head_count_kv", heads)),
        head_dim=int(key("attention.key_length", hidden // heads)),
        rms_eps=float(key("attention.layer_norm_rms_epsilon", 1e-6)),
        rope_theta=float(key("rope.freq_base", 10000.0)),
        rope_scaling=scaling,
        rope_freq_factors=factors,
        max_position=int(key("context_length", 4096)),
        tie_embeddings="output.weight" not in names,
        # llama.cpp loads each of these biases when its tensor is present (qwen2: q/k/v always)
        attention_bias=spec.qkv_bias or "blk.0.attn_q.bias" in names,
        o_bias="blk.0.attn_output.bias" in names,
        mlp_bias=spec.mlp_bias and "blk.0.ffn_gate.bias" in names,
        qk_norm=spec.qk_norm,
        # llama.cpp's converter permutes llama q/k rows into adjacent pairs; qwen stays NEOX.
        rope_layout=spec.gguf_rope_layout,
        bos_id=_gguf_field(reader, "tokenizer.ggml.bos_token_id", path),
        eos_ids=[] if eos is None else [int(eos)],
        **extra,
    )

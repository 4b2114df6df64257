"""What an architecture module declares: one Architecture record (llama.py, qwen2.py, ...), which
models/__init__.py collects. config, weights, loader, gguf_names and lowering ask the records
instead of branching on names, so a Llama-like architecture is one module plus its line there.
Also the HF config helpers every reader shares (config.py's, and an architecture's own from_hf).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from vkdecode.errors import ModelError


@dataclass(frozen=True)
class HfView:
    """A program weight read from an HF tensor of another layout (gpt-oss's stacked experts):
    source is its suffix after "model.layers.{i}.", stored(shape) the stored shape of the program's
    shape, view(array) the program's array from the stored one (a numpy view, copied at packing)."""

    source: str
    stored: Callable
    view: Callable
    # where the source may be MXFP4 blocks and scales (hf_mxfp4.py): the program's rows are every
    # step-th stored one from start
    mxfp4: tuple[int, int] | None = None
    # read through this view only where the checkpoint stores `source`, else as layer_names says
    # (Qwen3.5-MoE's fused experts as Qwen ships them; per expert as save_pretrained writes them)
    if_stored: bool = False


@dataclass(frozen=True)
class GgufView:
    """A program weight read from a GGUF tensor of another layout (the inverse of a llama.cpp
    converter transform): the tensor's logical shape is `stored`; the program's array is its rows
    `rows` (kept quantized where the rows are whole blocks), then `view(array)` if given (on f32)."""

    stored: tuple
    rows: object = None  # an index array, or None: every row in order
    view: Callable | None = None


@dataclass(frozen=True)
class Architecture:
    name: str  # ModelArgs.arch and GGUF `general.architecture` (unless gguf_name)
    builder: type  # the Program builder: llama.Builder or a subclass
    hf_classes: tuple[str, ...]  # HF config.json `architectures` entries it answers to
    hf_model_types: tuple[str, ...]  # HF `model_type` values, read when `architectures` is absent
    # ModelArgs from the common readers (config.py), switched by these
    qkv_bias: bool = False  # q/k/v biases always, whatever the config says (Qwen2)
    hf_o_bias: bool = True  # HF `attention_bias` gives an o-projection bias too (not Qwen2)
    mlp_bias: bool = False  # HF `mlp_bias` / GGUF ffn_gate.bias read (Llama)
    qk_norm: bool = False  # per-head RMSNorm of q and k
    # HF turns sliding windows on with `use_sliding_window` (Qwen), not by setting `sliding_window`
    # (Llama); either is refused
    hf_sliding_flag: bool = False
    # transformers' defaults of keys a config.json may leave out, where they are not Llama's
    # (settings.hf_default): head_dim, num_key_value_heads, max_position_embeddings
    hf_defaults: dict = field(default_factory=dict)
    gguf_rope_layout: str = "neox"  # "pairs": llama.cpp's converter permuted the q/k rows
    gguf_name: str = ""  # llama.cpp's name where it is not `name` (its key prefix too)
    # per-layer name -> GgufView, a function of the ModelArgs (as hf_views)
    gguf_views: Callable | None = None
    gguf_implemented: frozenset = frozenset()  # GGUF keys config_audit refuses that this one reads
    # or by hooks: from_hf(cfg, where) -> ModelArgs fields, its own reader and refusals;
    # gguf_fields(key, n_layers, hidden, heads) -> fields beyond the common ones; check(args) raises
    from_hf: Callable | None = None
    hf_fields: Callable | None = None  # (cfg, where) -> fields beyond the common reader's (MoE)
    gguf_fields: Callable | None = None
    check: Callable | None = None
    # tensors and loading
    layer_names: dict = field(default_factory=dict)  # overrides of gguf_names.LAYER_NAMES
    # per-layer name -> HfView: read through a view (or a function of the ModelArgs giving them)
    hf_views: dict | Callable = field(default_factory=dict)
    hf_norms_plus_one: bool = False  # HF norm weights hold w of x * (1 + w): the 1 is added at load
    # a multimodal checkpoint's text model (Qwen3.5's ConditionalGeneration): its tensors under this
    # prefix in place of "model.", and the other parts (vision tower, multi-token prediction heads)
    # under these prefixes, which the text decode step does not read (no prefix: a plain checkpoint's)
    hf_text_prefix: str = ""
    hf_other_parts: tuple[str, ...] = ()
    tokenizer_defaults: Callable | None = None  # (tokenizer) -> None, once it is loaded
    coop: bool = True  # tensor-core kernels (inputs rounded to f16) allowed
    # their matmul inputs scaled per row by a power of two into f16's range first (shaders/to_f16.comp
    # ROW_SCALE): activations that pass 65504
    coop_row_scale: bool = False


def hf_key(cfg: dict, where: str):
    """key(name, default=None): cfg[name], or default, or a ModelError naming the missing key."""

    def key(name, default=None):
        if name in cfg and cfg[name] is not None:
            return cfg[name]
        if default is None:
            raise ModelError(f"{where}: missing key {name!r}")
        return default

    return key


def hf_token_ids(cfg: dict, where: str) -> tuple[int | None, list[int]]:
    eos, bos = cfg.get("eos_token_id"), cfg.get("bos_token_id")
    eos_ids = [] if eos is None else ([eos] if isinstance(eos, int) else eos)
    if not (isinstance(eos_ids, list) and all(type(i) is int for i in eos_ids)) or type(bos) not in (
        int,
        type(None),
    ):
        raise ModelError(f"{where}: token ids must be integers (eos_token_id {eos!r}, bos_token_id {bos!r})")
    return bos, eos_ids


def hf_sizes(cfg: dict, where: str, kv_heads=None, head_dim=None) -> dict:
    """The ModelArgs sizes and token ids an architecture's own HF reader shares: vocabulary, hidden,
    FFN, layers, heads (kv_heads / head_dim: transformers' defaults where the config leaves them
    out; None: all heads, hidden / heads), rms eps (default 1e-6), bos and eos ids."""
    from vkdecode.models import settings

    key = hf_key(cfg, where)
    hidden, heads = int(key("hidden_size")), int(key("num_attention_heads"))
    bos, eos_ids = hf_token_ids(cfg, where)
    return {
        "vocab_size": int(key("vocab_size")),
        "hidden_size": hidden,
        "intermediate_size": int(key("intermediate_size")),
        "n_layers": int(key("num_hidden_layers")),
        "n_heads": heads,
        "n_kv_heads": int(key("num_key_value_heads", kv_heads or heads)),
        "head_dim": int(key("head_dim", head_dim or hidden // heads)),
        "rms_eps": settings.number(key("rms_norm_eps", 1e-6), "rms_norm_eps", where),
        "bos_id": bos,
        "eos_ids": eos_ids,
    }

"""Qwen3: the Llama step plus a per-head RMSNorm of q and k before rope (the qk_norm hook)."""

from __future__ import annotations

from vkdecode.models.arch import Architecture
from vkdecode.models.llama import Builder


class Qwen3Builder(Builder):
    def __init__(self, args, ctx: int, weight_dtypes: dict[str, str] | None, sampling: bool = False):
        assert args.qk_norm, "qwen3 always normalises q and k per head"
        super().__init__(args, ctx, weight_dtypes, sampling)


ARCHITECTURE = Architecture(
    "qwen3",
    Qwen3Builder,
    ("Qwen3ForCausalLM",),
    ("qwen3",),
    qk_norm=True,
    hf_sliding_flag=True,
    # Qwen3Config's defaults: a config.json without head_dim has 128, not hidden / heads
    hf_defaults={"head_dim": 128, "num_key_value_heads": 32, "max_position_embeddings": 32768},
)

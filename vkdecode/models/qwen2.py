"""Qwen2: the Llama step plus q/k/v projection biases (the builder's qkv_bias hook)."""

from __future__ import annotations

from vkdecode.models.arch import Architecture
from vkdecode.models.llama import Builder


class Qwen2Builder(Builder):
    def __init__(self, args, ctx: int, weight_dtypes: dict[str, str] | None, sampling: bool = False):
        assert args.attention_bias, "qwen2 always has q/k/v biases"
        super().__init__(args, ctx, weight_dtypes, sampling)


# q/k/v biases always and never an o bias, whatever the config says
ARCHITECTURE = Architecture(
    "qwen2",
    Qwen2Builder,
    ("Qwen2ForCausalLM",),
    ("qwen2",),
    qkv_bias=True,
    hf_o_bias=False,
    hf_sliding_flag=True,
    hf_defaults={"num_key_value_heads": 32, "max_position_embeddings": 32768},  # Qwen2Config's
)

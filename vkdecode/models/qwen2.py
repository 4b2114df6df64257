"""Qwen2: the Llama step plus q/k/v projection biases (the builder's qkv_bias hook)."""
from __future__ import annotations

from fusion.ir import Program
from vkdecode.models.config import ModelArgs
from vkdecode.models.llama import Builder

ARCH = "qwen2"


class Qwen2Builder(Builder):
    def __init__(self, args: ModelArgs, ctx: int, weight_dtypes: dict[str, str] | None,
                 sampling: bool = False):
        assert args.attention_bias, "qwen2 always has q/k/v biases"
        super().__init__(args, ctx, weight_dtypes, sampling)


def build_program(args: ModelArgs, ctx: int, weight_dtypes: dict[str, str] | None = None,
                  sampling: bool = False) -> Program:
    return Qwen2Builder(args, ctx, weight_dtypes, sampling).build()

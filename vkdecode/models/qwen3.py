"""Qwen3: the Llama step plus a per-head RMSNorm of q and k before rope (the qk_norm hook)."""
from __future__ import annotations

from fusion.ir import Program
from vkdecode.models.config import ModelArgs
from vkdecode.models.llama import Builder

ARCH = "qwen3"


class Qwen3Builder(Builder):
    def __init__(self, args: ModelArgs, ctx: int, weight_dtypes: dict[str, str] | None,
                 sampling: bool = False):
        assert args.qk_norm, "qwen3 always normalises q and k per head"
        super().__init__(args, ctx, weight_dtypes, sampling)


def build_program(args: ModelArgs, ctx: int, weight_dtypes: dict[str, str] | None = None,
                  sampling: bool = False) -> Program:
    return Qwen3Builder(args, ctx, weight_dtypes, sampling).build()

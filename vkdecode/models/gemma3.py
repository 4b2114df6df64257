"""Gemma 3 (text): the Llama step with q/k norms, sandwich norms (post_attn_norm / post_ffn_norm
on each block's output before its residual add), GeGLU (gelu_mul), embeddings scaled by
sqrt(hidden), attention scale query_pre_attn_scalar ** -0.5, and sliding-window layers with
their own rope base. Norm weights arrive as 1 + w (weights.py), so rms_norm is the plain op."""
from __future__ import annotations

import math

import numpy as np

from fusion.ir import Program
from vkdecode.models import rope
from vkdecode.models.config import ModelArgs
from vkdecode.models.config_gemma3 import SLIDING
from vkdecode.models.llama import Builder

ARCH = "gemma3"


class Gemma3Builder(Builder):
    def __init__(self, args: ModelArgs, ctx: int, weight_dtypes: dict[str, str] | None,
                 sampling: bool = False):
        assert args.qk_norm and args.hidden_act == "gelu_tanh", "gemma3 has q/k norms and GeGLU"
        super().__init__(args, ctx, weight_dtypes, sampling)

    def sliding(self, i: int) -> bool:
        return self.args.layer_types[i] == SLIDING

    def rope_table(self, i: int) -> str:
        a = self.args
        if self.sliding(i):   # sliding layers: their own base, never scaled (transformers, llama.cpp)
            return self.p.constant("rope_freqs_swa", rope.inv_freq(a.rope_local_theta, a.head_dim))
        return super().rope_table(i)

    def window(self, i: int) -> int:
        return self.args.sliding_window if self.sliding(i) else 0

    def attn_scale(self) -> float:
        return self.args.query_pre_attn_scalar ** -0.5

    def post_norm(self, i: int, which: str, x: str) -> str:
        a, out = self.args, f"layers.{i}.{which}_post_normed"
        self.p.op("rms_norm", [x, f"layers.{i}.post_{which}_norm"], [self.act(out, a.hidden_size)], eps=a.rms_eps)
        return out

    def embed_scale(self) -> float:
        # transformers: embed_tokens(ids) * tensor(sqrt(hidden)) cast to the table's dtype (f32 here)
        return float(np.float32(math.sqrt(self.args.hidden_size)))


def build_program(args: ModelArgs, ctx: int, weight_dtypes: dict[str, str] | None = None,
                  sampling: bool = False) -> Program:
    return Gemma3Builder(args, ctx, weight_dtypes, sampling).build()

"""Model families (one file each), weights, tokenizer and the loader."""
from __future__ import annotations

from vkdecode.models import gemma3, llama, qwen2, qwen3

FAMILIES = {"llama": llama, "qwen2": qwen2, "qwen3": qwen3, "gemma3": gemma3}


def build_program(args, ctx: int, weight_dtypes: dict[str, str] | None = None, sampling: bool = False):
    """Dispatch to the family module of args.arch; sampling=True ends the step in the GPU sampler."""
    return FAMILIES[args.arch].build_program(args, ctx, weight_dtypes, sampling)

"""Model architectures (one module each, its Architecture record collected here), weights,
tokenizer and the loader."""

from __future__ import annotations

from dataclasses import replace

from vkdecode.models import (
    gemma3,
    gpt_oss,
    llama,
    mixtral,
    olmoe,
    qwen2,
    qwen2moe,
    qwen3,
    qwen3moe,
    qwen3next,
    qwen35,
    qwen35moe,
)
from vkdecode.models.arch import Architecture
from vkdecode.options import KV_DTYPES

# name -> record; this order is the order error messages list them in
ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        llama.ARCHITECTURE,
        qwen2.ARCHITECTURE,
        qwen3.ARCHITECTURE,
        gemma3.ARCHITECTURE,
        qwen3moe.ARCHITECTURE,
        mixtral.ARCHITECTURE,
        qwen2moe.ARCHITECTURE,
        olmoe.ARCHITECTURE,
        gpt_oss.ARCHITECTURE,
        qwen35.ARCHITECTURE,
        qwen35moe.ARCHITECTURE,
        qwen3next.ARCHITECTURE,
    )
}


def build_program(
    args, ctx: int, weight_dtypes: dict[str, str] | None = None, sampling: bool = False, kv_dtype: str = "f32"
):
    """The builder of args.arch's architecture; sampling=True ends the step in the GPU sampler;
    kv_dtype the KV cache's storage (set_kv_dtype)."""
    program = ARCHITECTURES[args.arch].builder(args, ctx, weight_dtypes, sampling).build()
    return set_kv_dtype(program, kv_dtype)


def set_kv_dtype(program, kv_dtype: str):
    """The caches every kv_write writes are stored as kv_dtype (f16 halves the attention's bytes and
    the KV memory; math stays f32). Done on the built program, so every family gets it alike."""
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown KV cache dtype {kv_dtype!r} (choose from {', '.join(KV_DTYPES)})")
    for op in program.ops:
        if op.kind == "kv_write":
            for name in op.outputs:
                program.values[name] = replace(program.values[name], dtype=kv_dtype)
    return program

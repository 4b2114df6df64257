"""Model families (one file each), weights, tokenizer and the loader."""
from __future__ import annotations

from dataclasses import replace

from vkdecode.models import gemma3, llama, qwen2, qwen3

FAMILIES = {"llama": llama, "qwen2": qwen2, "qwen3": qwen3, "gemma3": gemma3}


KV_DTYPES = ("f16", "f32")


def build_program(args, ctx: int, weight_dtypes: dict[str, str] | None = None, sampling: bool = False,
                  kv_dtype: str = "f32"):
    """Dispatch to the family module of args.arch; sampling=True ends the step in the GPU sampler;
    kv_dtype the KV cache's storage (set_kv_dtype)."""
    return set_kv_dtype(FAMILIES[args.arch].build_program(args, ctx, weight_dtypes, sampling), kv_dtype)


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

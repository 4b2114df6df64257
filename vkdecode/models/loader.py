"""load_model(path): weights + decode Program + tokenizer, from an HF directory or a GGUF file."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from fusion.ir import Program
from vkdecode.errors import ContextError, ModelError
from vkdecode.models import ARCHITECTURES, KV_DTYPES, build_program
from vkdecode.models.config import ModelArgs
from vkdecode.models.lazy import LazyWeight
from vkdecode.models.tokenizer import Tokenizer
from vkdecode.models.weights import load_weights, loading
from vkdecode.quant import PackedWeight

DEFAULT_CTX = 4096


@dataclass
class LoadedModel:
    args: ModelArgs
    program: Program
    weights: dict[str, PackedWeight | LazyWeight]  # keys = the program's weight value names
    tokenizer: Tokenizer
    path: str
    ctx: int
    meta: dict = field(default_factory=dict)  # format, notes, source_types (see weights.py)


def load_model(
    path, ctx: int | None = None, sampling: bool = False, kv_dtype: str = "f16", stream: bool = False
) -> LoadedModel:
    """kv_dtype: the KV cache's storage, f16 (default) or f32. stream: LazyWeights, each read and
    packed as it is uploaded (the API's one build: no host copy kept), else PackedWeights that any
    number of executors can reuse (the bench, the tests, the reference)."""
    path = str(path)
    if kv_dtype not in KV_DTYPES:
        raise ModelError(f"unknown KV cache dtype {kv_dtype!r} (choose from {', '.join(KV_DTYPES)})")
    with loading(path):
        return _load_model(path, ctx, sampling, kv_dtype, stream)


def _load_model(path: str, ctx: int | None, sampling: bool, kv_dtype: str, stream: bool) -> LoadedModel:
    args, weights, meta = load_weights(path, stream)
    if ctx is None:
        ctx = min(DEFAULT_CTX, args.max_position)
    if not 0 < ctx <= args.max_position:
        raise ContextError(f"{path}: context {ctx} is outside 1..{args.max_position} (the model's maximum)")
    program = build_program(args, ctx, {k: w.dtype for k, w in weights.items()}, sampling, kv_dtype)
    if os.path.isdir(path):
        tokenizer = Tokenizer.from_hf_dir(path, extra_eos=args.eos_ids)
    else:
        tokenizer = Tokenizer.from_gguf(meta.pop("reader"), path)
        tokenizer.eos_ids.update(args.eos_ids)
    if ARCHITECTURES[args.arch].tokenizer_defaults is not None:  # Gemma 3's end of turn, chat template
        ARCHITECTURES[args.arch].tokenizer_defaults(tokenizer)
    meta.pop("reader", None)  # the memory-mapped reader is not needed past loading
    return LoadedModel(args, program, weights, tokenizer, path, ctx, meta)

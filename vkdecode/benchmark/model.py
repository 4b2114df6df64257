"""What a benchmark runs: a model file, or a bench shape with random weights (shapes.py), with its
prompt ids and the weight bytes one decode step reads."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from vkdecode.benchmark.shapes import shape_model

PROMPT_TEXT = "The quick brown fox jumps over the lazy dog, and the capital of France is Paris. "


@dataclass
class BenchModel:
    name: str  # file name, or the shape name
    source: str  # path, or "random weights"
    quant: str  # dominant weight dtype, upper case (Q4_1, F16, ...)
    args: object  # ModelArgs
    program: object
    weights: dict
    prompt_ids: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # the loader's (e.g. tensors dequantized at load)

    @property
    def size_bytes(self) -> int:
        return sum(w.nbytes for w in self.weights.values())

    @property
    def params(self) -> int:
        return sum(int(np.prod(w.shape)) for w in self.weights.values())

    def describe(self) -> dict:
        a = self.args
        return {
            "name": self.name,
            "source": self.source,
            "quant": self.quant,
            "arch": a.arch,
            "size_bytes": self.size_bytes,
            "params": self.params,
            "n_layers": a.n_layers,
            "hidden_size": a.hidden_size,
            "vocab_size": a.vocab_size,
            "weight_bytes_per_token": weight_bytes_per_token(self.program, self.weights),
            "weight_bytes_by_dtype": self.bytes_by_dtype(),
            "kv_dtype": self.kv_dtype,
            "notes": self.notes,
        }

    def bytes_by_dtype(self) -> dict[str, int]:
        """Device bytes of the weights by their dtype on the device (what the matvecs read)."""
        out: dict[str, int] = {}
        for w in self.weights.values():
            out[w.dtype] = out.get(w.dtype, 0) + w.nbytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def kv_dtype(self) -> str:
        caches = {v.dtype for v in self.program.values.values() if v.kind == "state"}
        return "/".join(sorted(caches)) or "-"


def dominant_quant(weights: dict) -> str:
    by = {}
    for w in weights.values():
        by[w.dtype] = by.get(w.dtype, 0) + w.nbytes
    return max(by, key=by.get).upper()


def file_model(path: str, ctx: int, prompt_tokens: int, kv_dtype: str = "f16") -> BenchModel:
    from vkdecode.models.loader import load_model

    lm = load_model(path, ctx=ctx, kv_dtype=kv_dtype)
    ids = lm.tokenizer.encode(PROMPT_TEXT * (1 + prompt_tokens // 8))[:prompt_tokens]
    return BenchModel(
        os.path.basename(os.path.normpath(path)),
        path,
        dominant_quant(lm.weights),
        lm.args,
        lm.program,
        lm.weights,
        ids,
        list(lm.meta.get("notes", [])),
    )


def random_model(
    shape: str,
    quant: str,
    ctx: int,
    prompt_tokens: int,
    seed: int = 0,
    kv_dtype: str = "f16",
    n_layers: int = 0,
) -> BenchModel:
    args, program, weights = shape_model(shape, quant, ctx, seed, kv_dtype, n_layers)
    ids = np.random.default_rng(seed + 1).integers(0, args.vocab_size, prompt_tokens).tolist()
    name = f"{shape}-{n_layers}l" if n_layers else shape
    return BenchModel(name, "random weights", quant.upper(), args, program, weights, ids)


def weight_bytes_per_token(program, weights: dict) -> int:
    """Weight bytes one decode step reads: whole matrices, but only one row of the embedding table
    and the chosen experts of an MoE layer (stats.op_weight_bytes)."""
    from vkdecode.stats import op_weight_bytes

    total = 0
    for op in program.ops:
        for v in op.inputs:
            if program.values[v].kind != "weight":
                continue
            nb = weights[v].nbytes if v in weights else program.constants[v].nbytes
            total += op_weight_bytes(program, op, v, nb)
    return total

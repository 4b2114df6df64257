"""RoPE inverse-frequency tables, computed once on the host (the rope op reads them as a weight).

A table makes every rope variant the same kernel: plain theta, Llama 3's frequency-dependent
scaling, llama.cpp's `rope_freqs.weight` divisors, Gemma 3's per-layer-type bases. The math
follows transformers' modeling_rope_utils (f32 inv_freq; llama3 smoothing as
_compute_llama3_parameters), so the reference and the GPU use the very table transformers uses.
"""

from __future__ import annotations

import math

import numpy as np

LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def default_inv_freq(theta: float, head_dim: int) -> np.ndarray:
    """1 / theta ** (2i / d), in f32 like transformers (torch.arange(...).float() / dim, f32 pow)."""
    exps = np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)
    return (np.float32(1.0) / np.power(np.float32(theta), exps, dtype=np.float32)).astype(np.float32)


def llama3_inv_freq(theta: float, head_dim: int, scaling: dict) -> np.ndarray:
    """Llama 3.1's scaling: long wavelengths divided by factor, short ones kept, the band between
    interpolated (transformers' _compute_llama3_parameters, in f32 as torch computes it)."""
    inv = default_inv_freq(theta, head_dim)
    f32 = np.float32
    factor, lo, hi = (f32(scaling[k]) for k in LLAMA3_KEYS[:3])
    old = f32(scaling["original_max_position_embeddings"])
    low_wavelen, high_wavelen = old / lo, old / hi
    wavelen = f32(2 * math.pi) / inv
    scaled = np.where(wavelen > low_wavelen, inv / factor, inv).astype(f32)
    smooth = ((old / wavelen - lo) / (hi - lo)).astype(f32)
    smoothed = ((f32(1) - smooth) * scaled / factor + smooth * scaled).astype(f32)
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(f32)


def factor_inv_freq(theta: float, head_dim: int, factors) -> np.ndarray:
    """llama.cpp's form: the base frequencies divided by the file's `rope_freqs.weight` entries."""
    return (default_inv_freq(theta, head_dim) / np.asarray(factors, dtype=np.float32)).astype(np.float32)


def inv_freq(theta: float, head_dim: int, scaling: dict | None = None, factors=None) -> np.ndarray:
    """The table of one layer kind. `scaling` is a normalised rope_scaling dict (config.py),
    `factors` llama.cpp's divisors; at most one of them is given."""
    if factors is not None:
        return factor_inv_freq(theta, head_dim, factors)
    kind = (scaling or {}).get("rope_type", "default")
    if kind == "default":
        return default_inv_freq(theta, head_dim)
    if kind == "llama3":
        return llama3_inv_freq(theta, head_dim, scaling)
    if kind == "linear":
        return (default_inv_freq(theta, head_dim) / np.float32(scaling["factor"])).astype(np.float32)
    raise ValueError(f"rope type {kind!r} has no table")  # config.py refuses these first


def llama3_rope_factors(args) -> np.ndarray:
    """llama.cpp convert_hf_to_gguf's `rope_freqs.weight` for Llama 3 scaling (its loop, verbatim
    math): what a GGUF writer stores in place of the scaling dict (tests and bench/shape_gguf.py)."""
    sc, d = args.rope_scaling, args.head_dim
    freqs = 1.0 / (args.rope_theta ** (np.arange(0, d, 2, dtype=np.float32) / d))
    low_wavelen = sc["original_max_position_embeddings"] / sc["low_freq_factor"]
    high_wavelen = sc["original_max_position_embeddings"] / sc["high_freq_factor"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(sc["factor"])
        else:
            smooth = (sc["original_max_position_embeddings"] / wavelen - sc["low_freq_factor"]) / (
                sc["high_freq_factor"] - sc["low_freq_factor"]
            )
            out.append(1 / ((1 - smooth) / sc["factor"] + smooth))
    return np.array(out, dtype=np.float32)

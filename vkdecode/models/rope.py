"""RoPE inverse-frequency tables, computed once on the host (the rope op reads them as a weight).

A table makes every rope variant the same kernel: plain theta, Llama 3's frequency-dependent
scaling, YaRN's ramp between interpolated and kept frequencies, llama.cpp's `rope_freqs.weight`
divisors, Gemma 3's per-layer-type bases. The math
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


def yarn_inv_freq(theta: float, head_dim: int, scaling: dict) -> np.ndarray:
    """YaRN (transformers' _compute_yarn_parameters, llama.cpp's ggml_rope_yarn): frequencies that
    turn fewer than beta_slow times over the original context are divided by factor, those turning
    more than beta_fast times are kept, and a linear ramp over the dimensions between blends the
    two. truncate floors / ceils the ramp's ends (llama.cpp always does)."""
    f32, d = np.float32, head_dim
    base, factor = float(theta), float(scaling["factor"])
    old = float(scaling["original_max_position_embeddings"])

    def dim_at(rotations: float) -> float:  # the dimension that turns `rotations` times over old
        return d * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_at(scaling["beta_fast"]), dim_at(scaling["beta_slow"])
    if scaling["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, d - 1)
    if low == high:
        high += 0.001  # transformers' guard against a zero-width ramp
    pos_freqs = np.power(f32(base), np.arange(0, d, 2, dtype=f32) / f32(d), dtype=f32)
    extrapolated = (f32(1) / pos_freqs).astype(f32)
    interpolated = (f32(1) / (f32(factor) * pos_freqs)).astype(f32)
    ramp = np.clip((np.arange(d // 2, dtype=f32) - f32(low)) / f32(high - low), 0, 1).astype(f32)
    keep = (f32(1) - ramp).astype(f32)
    return (interpolated * (f32(1) - keep) + extrapolated * keep).astype(f32)


def yarn_attention_factor(scaling: dict) -> float:
    """The factor YaRN multiplies cos and sin by (so q.k by its square): a given attention_factor,
    else 0.1 ln(factor) + 1, DeepSeek's mscale / mscale_all_dim ratio where both are given."""
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])

    def mscale(m: float) -> float:
        return 1.0 if scaling["factor"] <= 1 else 0.1 * m * math.log(scaling["factor"]) + 1.0

    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(scaling["mscale"]) / mscale(scaling["mscale_all_dim"])
    return mscale(1.0)


def attention_factor(scaling: dict | None) -> float:
    """What a rope scaling multiplies q.k by (1 but for YaRN): the attention scale takes it."""
    if (scaling or {}).get("rope_type") != "yarn":
        return 1.0
    return yarn_attention_factor(scaling) ** 2


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
    if kind == "yarn":
        return yarn_inv_freq(theta, head_dim, scaling)
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

"""Random-weight models of real shapes, built in memory (no model hub): `vkdecode bench --shape`.

Weights are valid but random: f16 halves drawn directly as bit patterns (a 1.2 GB Qwen3-0.6B table
in about a second, no float64 temporaries), quantized blocks as random quant words with small
random scales. Decode speed does not depend on the values; they only need to stay finite.
"""

from __future__ import annotations

import numpy as np

from vkdecode.benchmark.shapes_moe import MOE_SHAPES, TINY_DIMS
from vkdecode.benchmark.shapes_qwen35 import QWEN35_SHAPES
from vkdecode.models import build_program
from vkdecode.models.config import ModelArgs
from vkdecode.models.gguf_names import expected_shapes, source_name
from vkdecode.models.qwen35_gguf import LINEAR
from vkdecode.quant import (
    BLOCK,
    DTYPES,
    QUANT_TYPES,
    WORDS_PER_BLOCK,
    PackedWeight,
    block_elems,
    pack_gguf_blocks,
    row_words,
)

SHAPES = {
    "smollm2-135m": {
        "arch": "llama",
        "n_layers": 30,
        "hidden_size": 576,
        "n_heads": 9,
        "n_kv_heads": 3,
        "head_dim": 64,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "tie_embeddings": True,
        "rope_theta": 100000.0,
        "rope_layout": "pairs",
    },
    "qwen3-0.6b": {
        "arch": "qwen3",
        "n_layers": 28,
        "hidden_size": 1024,
        "n_heads": 16,
        "n_kv_heads": 8,
        "head_dim": 128,
        "intermediate_size": 3072,
        "vocab_size": 151936,
        "tie_embeddings": True,
        "qk_norm": True,
        "rope_theta": 1000000.0,
        "rope_layout": "neox",
    },
    # Gemma-3-270M: every 6th layer global, the others a 512-row sliding window
    "gemma3-270m": {
        "arch": "gemma3",
        "n_layers": 18,
        "hidden_size": 640,
        "n_heads": 4,
        "n_kv_heads": 1,
        "head_dim": 256,
        "intermediate_size": 2048,
        "vocab_size": 262144,
        "tie_embeddings": True,
        "qk_norm": True,
        "rope_theta": 1000000.0,
        "rope_layout": "neox",
        "hidden_act": "gelu_tanh",
        "sliding_window": 512,
        "rope_local_theta": 10000.0,
        "query_pre_attn_scalar": 256.0,
        "layer_types": tuple(
            "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(18)
        ),
    },
    # Llama-3.2-1B and Llama-3.1-8B(-Instruct): GGUF llama (q/k rows permuted: "pairs"), rms eps 1e-5,
    # Llama 3 rope scaling as in their config.json (a GGUF carries it as rope_freqs.weight)
    "llama3.2-1b": {
        "arch": "llama",
        "n_layers": 16,
        "hidden_size": 2048,
        "n_heads": 32,
        "n_kv_heads": 8,
        "head_dim": 64,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "tie_embeddings": True,
        "rope_theta": 500000.0,
        "rope_layout": "pairs",
        "rms_eps": 1e-5,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192.0,
        },
    },
    "llama3.1-8b": {
        "arch": "llama",
        "n_layers": 32,
        "hidden_size": 4096,
        "n_heads": 32,
        "n_kv_heads": 8,
        "head_dim": 128,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "tie_embeddings": False,
        "rope_theta": 500000.0,
        "rope_layout": "pairs",
        "rms_eps": 1e-5,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192.0,
        },
    },
    "tiny": {
        "arch": "llama",
        **TINY_DIMS,
        "tie_embeddings": True,
        "rope_theta": 10000.0,
        "rope_layout": "pairs",
    },
    **MOE_SHAPES,
    **QWEN35_SHAPES,
}
QUANTS = (*DTYPES, "q4_k_m")
# llama.cpp's fallback for a tensor whose rows are no whole number of 256-superblocks
# (llama_tensor_get_type: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0)
K_FALLBACK = {n: d.fallback for n, d in DTYPES.items() if d.fallback}
# the Q2..Q5 types (under q6_k's 6.56 bits a weight), whose files keep a tied token table q8_0
LOW_BIT = tuple(n for n, d in DTYPES.items() if d.quant and d.bits < 6.5)
# matrices llama.cpp never quantizes: the MoE router (its quantizer skips ffn_gate_inp, which the
# converter writes f32) and Qwen2-MoE's shared-expert gate (a vector in the file); f32 in every quant
F32_MATRICES = ("router", "shexp_gate_inp")
# llama.cpp's Q4_K_M for a model of exactly 8 experts (Mixtral's): attn_k and attn_v q8_0 (over the
# _more_bits q6_k), attn_output q5_k
EIGHT_EXPERTS = {"wk": "q8_0", "wv": "q8_0", "wo": "q5_k"}
# Target std of a weight; with RMSNorm between layers the activations stay O(1).
STD = 0.02
# an mxfp4 block is 2^(e - 128) * table[n], table std ~5.9: the e that gives std near STD
MXFP4_E = 128 + round(float(np.log2(STD / 5.9)))


def shape_args(shape: str, max_position: int = 1 << 16, n_layers: int = 0) -> ModelArgs:
    """ModelArgs of `shape`; n_layers > 0 keeps only the first n_layers (a quicker variant of the
    same widths, for lavapipe runs and tests). A shape that names its max_position keeps it."""
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (choose from {', '.join(SHAPES)})")
    kw = {"rms_eps": 1e-6, "max_position": max_position, **SHAPES[shape]}
    if n_layers > 0:
        kw["n_layers"] = n_layers
        if kw.get("layer_types"):
            kw["layer_types"] = kw["layer_types"][:n_layers]
    return ModelArgs(eos_ids=[], **kw)


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the first and last eighth of the layers and every third between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fitted(dtype: str, n_in: int) -> str:
    """dtype, or llama.cpp's fallback where rows of n_in are no whole number of its superblocks."""
    return dtype if dtype not in K_FALLBACK or n_in % block_elems(dtype) == 0 else K_FALLBACK[dtype]


def q4_k_m_dtype(name: str, shape: tuple, args: ModelArgs) -> str:
    """The type llama.cpp's Q4_K_M recipe gives a matrix: Q6_K for the output head (and a tied token
    table), attn_v and ffn_down (an MoE layer's ffn_down_exps and _shexp: llama.cpp takes the layer from
    the name) in _more_bits layers; Q5_K for attn_qkv (Qwen3.5's linear layers); Q4_K otherwise;
    EIGHT_EXPERTS for 8-expert models; then the fallback for rows that are no whole superblocks."""
    layer = int(name.split(".")[1]) if name.startswith("layers.") else -1
    kind = name.rsplit(".", 1)[-1]
    head = name == "lm_head" or (name == "tok_embd" and args.tie_embeddings)
    # llama.cpp counts attn_v tensors, not layers (its n: attn_v and attn_qkv, one a layer)
    i = layer - args.layer_types[:layer].count(LINEAR) if kind == "wv" else layer
    more = kind in ("wv", "w_down", "exp_down", "shexp_down") and _more_bits(i, args.n_layers)
    dt = "q6_k" if head or more else "q5_k" if kind == "lin_qkv" else "q4_k"
    if args.n_experts == 8:
        dt = EIGHT_EXPERTS.get(kind, dt)
    return _fitted(dt, shape[-1])


def weight_dtypes(args: ModelArgs, quant: str) -> dict[str, str]:
    """Matrices in `quant`; like llama.cpp's Q4/Q5 files (the real SmolLM2 Q4_1 GGUF included), a
    tied token table that doubles as the output head stays q8_0. q4_k_m mixes types as llama.cpp's
    Q4_K_M does (q4_k_m_dtype); a single K type falls back as llama.cpp does per tensor. Stacked
    experts (3-D) take a matrix's type, except in mxfp4 (llama.cpp's MXFP4_MOE: mxfp4 experts, the
    other matrices q8_0; a dense model as any quant); F32_MATRICES and biases are left out (f32)."""
    out = {}
    for name, shape in expected_shapes(args).items():
        if len(shape) == 1 or name.rsplit(".", 1)[-1] in F32_MATRICES:
            continue
        if source_name(name, "gguf", args.arch).endswith(".bias"):  # gpt-oss's expert biases (2-D):
            continue  # f32, as llama.cpp's converter writes every bias
        if quant == "q4_k_m":
            out[name] = q4_k_m_dtype(name, shape, args)
            continue
        if quant == "mxfp4" and args.n_experts:  # llama.cpp's MXFP4_MOE (its gpt-oss files): stacked
            out[name] = "mxfp4" if len(shape) == 3 else "q8_0"  # experts mxfp4, other matrices q8_0
            continue
        dt = "q8_0" if name == "tok_embd" and args.tie_embeddings and quant in LOW_BIT else quant
        out[name] = _fitted(dt, shape[-1])
    return out


def random_halves(rng, n: int, scale: float) -> np.ndarray:
    """n random float16 values with |x| in [scale, 2*scale) and random sign, as uint16 bits."""
    exp = int(np.floor(np.log2(scale))) + 15
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)
    return (bits & np.uint16(0x83FF)) | np.uint16(exp << 10)


def random_weight(dtype: str, shape: tuple, rng) -> PackedWeight:
    if len(shape) == 1:  # norms (and biases): around 1 so every layer stays well scaled
        return PackedWeight(
            "f32", shape, {"data": (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)}
        )
    if len(shape) == 3:  # stacked experts (experts, out, in): packed as their rows, as the loader does
        shape = (shape[0] * shape[1], shape[2])
    out, n_in = shape
    if dtype == "f32":
        return PackedWeight("f32", shape, {"data": (STD * rng.standard_normal(shape)).astype(np.float32)})
    if dtype == "f16":
        data = random_halves(rng, out * n_in, STD).view(np.uint32).reshape(out, n_in // 2)
        return PackedWeight("f16", shape, {"data": data})
    if dtype not in QUANT_TYPES:
        raise ValueError(f"no random weights for dtype {dtype!r} (choose from {', '.join(QUANTS)})")
    if dtype not in WORDS_PER_BLOCK:
        return _random_split(dtype, shape, rng)
    nb = n_in // BLOCK
    if dtype == "mxfp4":
        raw = rng.integers(0, 256, (out, nb, 17), dtype=np.uint8)
        raw[:, :, 0] = MXFP4_E + rng.integers(-1, 2, (out, nb))
        return pack_gguf_blocks(raw, dtype, shape)
    q = rng.integers(0, 1 << 32, (out, nb * WORDS_PER_BLOCK[dtype]), dtype=np.uint32)
    # quant values have std about 74 (q8_0), 9.2 (q5_0) or 4.6 (4-bit): scale d so values have std near STD
    d = random_halves(rng, out * nb, STD / {"q8_0": 74.0, "q5_0": 9.2}.get(dtype, 4.6)) & np.uint16(0x7FFF)
    s = d.astype(np.uint32).reshape(out, nb)
    if dtype == "q4_1":  # m = -8 d centres the unsigned nibbles on zero
        m = (random_halves(rng, out * nb, 8 * STD / 4.6) | np.uint16(0x8000)).astype(np.uint32)
        s |= m.reshape(out, nb) << 16
    return PackedWeight(dtype, shape, {"q": q, "s": s})


def _random_split(dtype: str, shape: tuple, rng) -> PackedWeight:
    """Random q words; s words random (sub-block scales) except the f16 super-scales, which are
    set so values have std near STD and the unsigned types are centred (dmin / m)."""
    out, n_in = shape
    q = rng.integers(0, 1 << 32, (out, row_words(dtype, n_in, "q")), dtype=np.uint32)
    s = rng.integers(0, 1 << 32, (out, row_words(dtype, n_in, "s")), dtype=np.uint32)
    nb = n_in // block_elems(dtype)
    sw = s.reshape(out, nb, -1)
    if dtype in ("q4_k", "q5_k"):  # d * sc * n - dmin * m, sc and m ~32: dmin = mean(n) d centres
        mean_n = 7.5 if dtype == "q4_k" else 15.5
        d = random_halves(rng, out * nb, STD / 32 / (4.6 if dtype == "q4_k" else 9.2)) & np.uint16(0x7FFF)
        dmin = (d.view(np.float16).astype(np.float32) * mean_n).astype(np.float16).view(np.uint16)
        sw[:, :, 0] = (d.astype(np.uint32) | (dmin.astype(np.uint32) << 16)).reshape(out, nb)
    elif dtype == "q6_k":  # d * sc * (n - 32), n - 32 std ~18; sc kept in 0..15 (rms ~9) so
        sw[:, :, :4] &= np.uint32(0x0F0F0F0F)  # d stays a normal f16
        sw[:, :, 4] = (random_halves(rng, out * nb, STD / 9 / 18) & np.uint16(0x7FFF)).reshape(out, nb)
    elif dtype == "q2_k":  # d * sc * n - dmin * m, sc and m ~7.5, n ~1.5: dmin = 1.5 d centres
        d = random_halves(rng, out * nb, STD / 7.5 / 1.1) & np.uint16(0x7FFF)
        dmin = (d.view(np.float16).astype(np.float32) * 1.5).astype(np.float16).view(np.uint16)
        sw[:, :, 4] = (d.astype(np.uint32) | (dmin.astype(np.uint32) << 16)).reshape(out, nb)
    elif dtype == "q3_k":  # d * sc * (n - 4), 6-bit signed sc (rms ~18), n - 4 std ~2.3
        sw[:, :, 3] = (random_halves(rng, out * nb, STD / 18 / 2.3) & np.uint16(0x7FFF)).reshape(out, nb)
    elif dtype == "q5_1":  # d * n + m, m = -16 d
        d = random_halves(rng, out * nb, STD / 9.2) & np.uint16(0x7FFF)
        m = (-16 * d.view(np.float16).astype(np.float32)).astype(np.float16).view(np.uint16)
        sw[:, :, 0] = (d.astype(np.uint32) | (m.astype(np.uint32) << 16)).reshape(out, nb)
    else:  # iq4_nl: d * table[n], table std ~70
        sw[:, :, 0] = (random_halves(rng, out * nb, STD / 70) & np.uint16(0x7FFF)).reshape(out, nb)
    return PackedWeight(dtype, shape, {"q": q, "s": s})


def shape_model(shape: str, quant: str, ctx: int, seed: int = 0, kv_dtype: str = "f16", n_layers: int = 0):
    """-> (ModelArgs, Program, {name: PackedWeight}) of a random model of `shape` in `quant`, its
    KV cache in kv_dtype (n_layers > 0: only that many layers)."""
    quant = quant.lower()
    if quant not in QUANTS:
        raise ValueError(f"unknown quant {quant!r} (choose from {', '.join(QUANTS)})")
    args = shape_args(shape, n_layers=n_layers)
    dtypes = weight_dtypes(args, quant)
    rng = np.random.default_rng(seed)
    weights = {
        name: random_weight(dtypes.get(name, "f32"), shape, rng)
        for name, shape in expected_shapes(args).items()
    }
    return args, build_program(args, ctx, dtypes, kv_dtype=kv_dtype), weights

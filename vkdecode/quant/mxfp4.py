"""MXFP4 (gpt-oss's experts) kept as MXFP4 on the device: dtype mxfp4, 17 bytes per 32 weights as
in the file; f32 only for a tensor with a block the kernels cannot decode exactly.

ggml's MXFP4 block (17 bytes): e, an E8M0 exponent, then 16 bytes of 4-bit indices, byte j holding
element j in its low nibble and element j + 16 in its high nibble. Element i is
KVALUES[idx_i] * 2^(e - 128) (the e2m1 values doubled, hence ggml's E8M0_TO_FP32_HALF).

Device layout (blocks.py's words): q: each block's 16 index bytes as 4 words (q4_0's / iq4_nl's
nibble words); s: a row's e bytes, one a block, zero-padded to a whole word. The kernels
(dequant.glsl block_dm) make 2^(e - 128) as the f32 whose exponent field is e - 1: exact for e >= 2,
0 for e <= 1. A value KVALUES[idx] * 2^(e - 128) is then exact (a normal f32) for e in
E_KERNEL, whose top is the tensor-core tiles' (dequant_half.glsl: f16, whose largest finite value
is 65504; a block at e 140 reaches 12 * 2^12, and a weight of 2^13 or more is no trained model's);
below e 103 the tiles flush a block's values (under 12 * 2^-25) to zero, as f16 rounding would.
A block outside E_KERNEL is exact only where all its indices are +-0 (gguf's quantizer writes
all-zero blocks with e = 0). A tensor with any other block loads as f32 (load_dtype). q8_0, which
these tensors loaded as before, is no fallback: its f16 d and int8 q hold a block exactly only for
e - 128 within 8 (the room |q| <= 12 leaves in int8) of f16's [-24, 15], or all-zero indices,
all of which the kernels take.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

BLOCK_BYTES = 17  # gguf.GGML_QUANT_SIZES[MXFP4] = (32, 17)
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
E_KERNEL = (2, 140)  # raw e whose values the kernels decode exactly: 2^-126 <= |v| <= 12 * 2^12 (f16 tiles)


def _blocks(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, BLOCK_BYTES)


def _values(blocks: np.ndarray) -> np.ndarray:
    """int8 [n, 32]: each block's KVALUES in element order (low nibbles, then high)."""
    idx = blocks[:, 1:]
    return np.concatenate([KVALUES[idx & 0xF], KVALUES[idx >> 4]], axis=1)


def dequantize(raw: np.ndarray) -> np.ndarray:
    """f32 [n, 32] of MXFP4 block bytes: KVALUES[idx] * 2^(e - 128)."""
    blocks = _blocks(raw)
    return np.ldexp(_values(blocks).astype(np.float32), blocks[:, :1].astype(np.int32) - 128)


def in_kernel_range(e: np.ndarray) -> bool:
    """Whether every block exponent (raw e) is one the kernels decode whatever the indices."""
    e = np.asarray(e)
    return bool(((e >= E_KERNEL[0]) & (e <= E_KERNEL[1])).all())


def kernel_exact(raw: np.ndarray) -> bool:
    """Whether the mxfp4 kernels decode every block exactly: e in E_KERNEL, or indices all +-0."""
    blocks = _blocks(raw)
    out = blocks[(blocks[:, 0] < E_KERNEL[0]) | (blocks[:, 0] > E_KERNEL[1])]
    return not (out[:, 1:] & 0x77).any()  # bit 3 of a nibble is the sign: 0 and 8 are both zero


def pack(raw: np.ndarray, shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """raw: uint8 [out, in / 32 * 17] as the file stores it -> {"q", "s"} uint32 words (above)."""
    out, n_in = shape
    if n_in % 32:
        raise ValueError(f"mxfp4 needs an in-dim that is a multiple of 32, got {shape}")
    nb = n_in // 32
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(out, nb, BLOCK_BYTES)
    s = np.zeros((out, -(-nb // 4) * 4), np.uint8)
    s[:, :nb] = blocks[:, :, 0]
    q = np.ascontiguousarray(blocks[:, :, 1:]).view(np.uint32).reshape(out, nb * 4)
    return {"q": q, "s": s.view(np.uint32)}


def to_raw(parts: dict[str, np.ndarray], shape: tuple[int, int]) -> np.ndarray:
    """The inverse of pack: the file's bytes, uint8 [out, in / 32 * 17]."""
    out, n_in = shape
    nb = n_in // 32
    raw = np.empty((out, nb, BLOCK_BYTES), np.uint8)
    raw[:, :, 0] = parts["s"].view(np.uint8).reshape(out, -1)[:, :nb]
    raw[:, :, 1:] = parts["q"].view(np.uint8).reshape(out, nb, 16)
    return raw.reshape(out, -1)


NOTE_F32 = "MXFP4 dequantized to f32 at load (a block scale out of the mxfp4 kernels' range)"


def load_dtype(chunks: Iterable[np.ndarray]) -> str:
    """The device dtype of a tensor whose bytes come in chunks (whole blocks each): mxfp4 where the
    kernels decode every block exactly, else f32."""
    return "mxfp4" if all(kernel_exact(c) for c in chunks) else "f32"

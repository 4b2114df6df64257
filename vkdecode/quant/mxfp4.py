"""GGUF MXFP4 as q8_0, exactly: no MXFP4 kernel is needed, and the device holds 36 bytes per 32
weights (q8_0's words) rather than f32's 128.

ggml's MXFP4 block (17 bytes): e, an E8M0 exponent, then 16 bytes of 4-bit indices, byte j holding
element j in its low nibble and element j + 16 in its high nibble. Element i is
KVALUES[idx_i] * 2^(e - 128) (the e2m1 values doubled, hence ggml's E8M0_TO_FP32_HALF). A q8_0
block is d * q (d f16, q int8), so d = 2^(e - 128), q = KVALUES[idx] wherever that d is an f16
(normal or subnormal: e - 128 in [-24, 15]). Elsewhere d is clamped into that range and q shifted
by the difference, exact while the shifted q stay integers within int8: all-zero blocks (gguf's
quantizer writes them with e = 0), small quants up to 2^3 above 2^15, even ones below 2^-24. Other
blocks have no exact q8_0 form; the loader then keeps the tensor f32 (models/weights.py).
"""

from __future__ import annotations

import numpy as np

from vkdecode.quant.blocks import PackedWeight

BLOCK_BYTES = 17  # gguf.GGML_QUANT_SIZES[MXFP4] = (32, 17)
KVALUES = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
D_EXP = (-24, 15)  # powers of two an f16 holds (subnormal to normal)


def _blocks(raw: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1, BLOCK_BYTES)


def in_f16_range(e: np.ndarray) -> bool:
    """Whether every block exponent (raw e) gives a scale 2^(e - 128) that an f16 holds."""
    x = np.asarray(e, np.int32) - 128
    return bool(((x >= D_EXP[0]) & (x <= D_EXP[1])).all())


def _values(blocks: np.ndarray) -> np.ndarray:
    """int8 [n, 32]: each block's KVALUES in element order (low nibbles, then high)."""
    idx = blocks[:, 1:]
    return np.concatenate([KVALUES[idx & 0xF], KVALUES[idx >> 4]], axis=1)


def dequantize(raw: np.ndarray) -> np.ndarray:
    """f32 [n, 32] of MXFP4 block bytes: KVALUES[idx] * 2^(e - 128)."""
    blocks = _blocks(raw)
    return np.ldexp(_values(blocks).astype(np.float32), blocks[:, :1].astype(np.int32) - 128)


def to_q8_0(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """MXFP4 block bytes (any shape, whole blocks) -> (d float16 [n], q int8 [n, 32]) with
    d * q == the MXFP4 values bit for bit, or None where some block has no exact q8_0 form."""
    blocks = _blocks(raw)
    x = blocks[:, 0].astype(np.int32) - 128
    xd = np.clip(x, *D_EXP)
    q = _values(blocks)
    moved = np.flatnonzero(x != xd)
    if moved.size:  # rare: scales an f16 cannot hold
        s = np.clip(x[moved] - xd[moved], -8, 8)[:, None]  # past 8 only q = 0 fits either way (|q| <= 12)
        v = q[moved].astype(np.int32)
        up, down = np.maximum(s, 0), np.maximum(-s, 0)
        w = v << up
        if not ((np.abs(w) <= 127) & ((v & ((1 << down) - 1)) == 0)).all():
            return None
        q[moved] = (w >> down).astype(np.int8)  # whole: a right shift of multiples of 2^down
    d = np.ldexp(np.ones(len(xd), np.float32), xd).astype(np.float16)  # 2^xd: exact in f16
    return d, q


def exact(raw: np.ndarray) -> bool:
    """Whether to_q8_0(raw) is not None; reads the exponents alone unless some are out of range."""
    blocks = _blocks(raw)
    e = blocks[:, 0].astype(np.int32) - 128
    out = np.flatnonzero((e < D_EXP[0]) | (e > D_EXP[1]))
    return not out.size or to_q8_0(blocks[out]) is not None


def pack_mxfp4(raw: np.ndarray, shape: tuple[int, int]) -> PackedWeight:
    """raw: uint8 [out, in / 32 * 17] as the GGUF file stores it -> a q8_0 PackedWeight (the words
    blocks.pack_gguf_blocks makes of q8_0). ValueError where exact(raw) is False."""
    out, n_in = shape
    dq = to_q8_0(raw)
    if dq is None:
        raise ValueError("MXFP4 blocks with no exact q8_0 form (check exact() first)")
    d, q = dq
    s = d.view(np.uint16).astype(np.uint32).reshape(out, n_in // 32)
    return PackedWeight("q8_0", (out, n_in), {"q": q.reshape(out, n_in).view(np.uint32), "s": s})

"""GPU layout of weights: every tensor becomes arrays of 32-bit words a shader can index directly.

GGUF blocks are 18-34 bytes and not 4-byte aligned, so they are repacked at load:
  f32   data: float32 [out, in]
  f16   data: uint32  [out, in/2]  two halves per word, the even column in the low half
  q8_0  q: uint32 [out, in/4]      int8 quants, 8 words per 32-element block, little endian
  q4_0  q: uint32 [out, in/8]      the block's 16 GGUF bytes as 4 words: byte j holds element j in
  q4_1                              its low nibble and element j+16 in its high nibble
  q5_0  q: uint32 [out, in/32*5]   per block 4 words of nibbles (as q4_0) then 1 word qh whose
                                    bit e is the fifth bit of element e
  q*    s: uint32 [out, in/32]     per block: low 16 bits = scale d (f16 bits), high 16 bits =
                                    min m (f16 bits, q4_1 only; 0 otherwise)
Values: q8_0 d*q; q4_0 d*(n-8); q4_1 d*n+m; q5_0 d*(n-16).
A shader reads d, m with unpackHalf2x16(s) (core GLSL 4.50, no 16-bit storage needed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLOCK = 32
GGUF_BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22}
WORDS_PER_BLOCK = {"q8_0": 8, "q4_0": 4, "q4_1": 4, "q5_0": 5}


@dataclass
class PackedWeight:
    dtype: str                          # f32 | f16 | q8_0 | q4_0 | q4_1 | q5_0
    shape: tuple[int, int] | tuple[int]  # logical (out, in), or (n,) for 1-D f32 vectors
    parts: dict[str, np.ndarray]        # "data" or "q" + "s", each 2-D [out, words] (1-D for vectors)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.parts.values())

    def row_bytes(self, part: str) -> int:
        a = self.parts[part]
        return a.nbytes // a.shape[0]

    def dequantize(self) -> np.ndarray:
        return dequantize(self)


def pack_float(a: np.ndarray, dtype: str) -> PackedWeight:
    a = np.ascontiguousarray(a)
    if dtype == "f32" or a.ndim == 1:
        return PackedWeight("f32", a.shape, {"data": a.astype(np.float32)})
    if dtype == "f16":
        if a.shape[1] % 2:
            raise ValueError(f"f16 weight needs an even in-dim, got {a.shape}")
        return PackedWeight("f16", a.shape, {"data": a.astype(np.float16).view(np.uint32)})
    raise ValueError(f"not a float dtype: {dtype}")


def pack_gguf_blocks(raw: np.ndarray, dtype: str, shape: tuple[int, int]) -> PackedWeight:
    """raw: uint8 [out, nblocks * block_bytes] as the GGUF file stores it."""
    out, n_in = shape
    nb = n_in // BLOCK
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(out, nb, GGUF_BLOCK_BYTES[dtype])
    d = blocks[:, :, 0:2].copy().view(np.uint16)[..., 0].astype(np.uint32)
    if dtype == "q8_0":
        q = blocks[:, :, 2:34]
    elif dtype == "q4_0":
        q = blocks[:, :, 2:18]
    elif dtype == "q4_1":
        m = blocks[:, :, 2:4].copy().view(np.uint16)[..., 0].astype(np.uint32)
        d = d | (m << 16)
        q = blocks[:, :, 4:20]
    elif dtype == "q5_0":   # GGUF: d, qh[4], qs[16] -> words qs0..qs3, qh
        q = np.concatenate([blocks[:, :, 6:22], blocks[:, :, 2:6]], axis=2)
    else:
        raise ValueError(f"no block packing for {dtype}")
    qw = np.ascontiguousarray(q).view(np.uint32).reshape(out, nb * WORDS_PER_BLOCK[dtype])
    return PackedWeight(dtype, (out, n_in), {"q": qw, "s": np.ascontiguousarray(d)})


def quantize(a: np.ndarray, dtype: str) -> PackedWeight:
    """f32 [out, in] -> packed, through the gguf package's reference quantizer (as llama.cpp)."""
    if dtype in ("f32", "f16"):
        return pack_float(a, dtype)
    import gguf
    from gguf import quants
    raw = quants.quantize(np.ascontiguousarray(a, dtype=np.float32), gguf.GGMLQuantizationType[dtype.upper()])
    return pack_gguf_blocks(raw, dtype, a.shape)


def dequantize(w: PackedWeight) -> np.ndarray:
    if w.dtype == "f32":
        return w.parts["data"]
    if w.dtype == "f16":
        return w.parts["data"].view(np.float16).astype(np.float32).reshape(w.shape)
    out, n_in = w.shape
    nb = n_in // BLOCK
    s = w.parts["s"]
    d = (s & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)[..., None]
    m = (s >> 16).astype(np.uint16).view(np.float16).astype(np.float32)[..., None]
    q = w.parts["q"].reshape(out, nb, WORDS_PER_BLOCK[w.dtype])
    if w.dtype == "q8_0":
        vals = d * q.copy().view(np.int8).reshape(out, nb, 32).astype(np.float32)
    else:
        b = q[:, :, :4].copy().view(np.uint8).reshape(out, nb, 16)
        n = np.concatenate([b & 0xF, b >> 4], axis=2).astype(np.int32)
        if w.dtype == "q4_0":
            vals = d * (n - 8)
        elif w.dtype == "q4_1":
            vals = d * n + m
        else:
            hi = (q[:, :, 4:5] >> np.arange(32, dtype=np.uint32)) & 1
            vals = d * ((n | (hi.astype(np.int32) << 4)) - 16)
    return vals.reshape(out, n_in).astype(np.float32)

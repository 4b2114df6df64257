"""GPU layout of weights: every tensor becomes arrays of 32-bit words a shader can index directly.

GGUF blocks are 18-210 bytes and not 4-byte aligned, so they are repacked at load:
  f32   data: float32 [out, in]
  f16   data: uint32  [out, in/2]  two halves per word, the even column in the low half
  q8_0  q: uint32 [out, in/4]      int8 quants, 8 words per 32-element block, little endian
  q4_0  q: uint32 [out, in/8]      the block's 16 GGUF bytes as 4 words: byte j holds element j in
  q4_1                              its low nibble and element j+16 in its high nibble
  iq4_nl                            (iq4_nl: the nibble indexes a 16-entry non-linear table)
  q5_0  q: uint32 [out, in/32*5]   per block 4 words of nibbles (as q4_0) then 1 word qh whose
  q5_1                              bit e is the fifth bit of element e
  q*    s: uint32 [out, in/32]     per block: low 16 bits = scale d (f16 bits), high 16 bits =
                                    min m (f16 bits, q4_1 / q5_1 only; 0 otherwise)
  mxfp4 q: as q4_0;  s: uint32 [out, ceil(in/128)]  the row's E8M0 bytes, one a block (mxfp4.py)
K-quants keep the file's 256-element superblock, split into q and s words (kquant.py):
  q4_k  q: [out, in/256*32]  the 128 qs bytes: byte 32c+l holds element 64c+l (low nibble,
                             sub-block 2c) and 64c+32+l (high nibble, sub-block 2c+1)
        s: [out, in/256*4]   d | dmin << 16, then the 12 bytes of packed 6-bit scales and mins
  q5_k  q: [out, in/256*40]  qs as q4_k, then the 32 qh bytes (byte l, bit j: fifth bit of
                             element 32j+l);  s as q4_k
  q6_k  q: [out, in/256*48]  ql[128] then qh[64], as the file;  s: [out, in/256*5] the 16 int8
                             sub-block scales, then d (f16) and a 2-byte pad
  q2_k  q: [out, in/256*16]  qs[64]: byte 32h+l holds elements 128h+32j+l in bits 2j..2j+1;
                             s: [out, in/256*5] the 16 scale|min<<4 bytes, then d | dmin << 16
  q3_k  q: [out, in/256*24]  hmask[32] (byte l, bit k: third bit of element 32k+l), then qs as q2_k;
                             s: [out, in/256*4] the 12 bytes of packed 6-bit scales, d, a 2-byte pad
Values: q8_0 d*q; q4_0 d*(n-8); q4_1 d*n+m; q5_0 d*(n-16); q5_1 d*n+m; iq4_nl d*table[n];
mxfp4 2^(e-128)*table[n];
q4_k/q5_k d*sc_j*n - dmin*m_j; q6_k d*sc_j*(n-32); q2_k d*sc_j*n - dmin*m_j; q3_k d*(sc_j-32)*(n-4).
A shader reads d, m with unpackHalf2x16(s) (core GLSL 4.50, no 16-bit storage needed).

Why K-quants are split and not expanded: the bytes a matvec reads per token are the model's size,
so q4_k must stay 4.5 bits per weight on the device (a Q4_K_M file's size, not f32's 32 bits).
The split is a pure byte move (q: the quants, s: the scales, both 16-byte aligned per superblock
for q4_k/q5_k), so a shader reads a superblock's quant word per invocation exactly as it reads a
q4_0 nibble word, and the scales from a second array (the same for 32 adjacent invocations, so a
broadcast load); the 6-bit scales are decoded in the shader from the file's packing (a few integer
ops per unit) rather than widened at load, so device bytes equal file bytes (q6_k: +1%, its pad).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vkdecode.quant import kquant as quant_k
from vkdecode.quant import mxfp4
from vkdecode.quant.registry import (
    BLOCK,
    FLOAT_TYPES,
    GGUF_BLOCK_BYTES,
    SPLIT_TYPES,
    WORDS_PER_BLOCK,
    row_words,
)


@dataclass
class PackedWeight:
    dtype: str  # a registry.DTYPES name
    shape: tuple[int, int] | tuple[int]  # logical (out, in), or (n,) for 1-D f32 vectors
    parts: dict[str, np.ndarray]  # "data" or "q" + "s", each 2-D [out, words] (1-D for vectors)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.parts.values())

    @property
    def part_bytes(self) -> dict[str, int]:
        return {k: a.nbytes for k, a in self.parts.items()}

    def packed(self) -> PackedWeight:
        """Itself: what the memory plan asks of every weight (models/lazy.py packs on demand)."""
        return self

    def row_bytes(self, part: str) -> int:
        a = self.parts[part]
        return a.nbytes // a.shape[0]

    def dequantize(self) -> np.ndarray:
        return dequantize(self)


def packed_part_bytes(dtype: str, shape: tuple[int, ...]) -> dict[str, int]:
    """Bytes of each part a weight of this dtype and shape packs to, known without packing it (the
    memory plan sizes the device memory from them before a lazy weight is read)."""
    if dtype not in FLOAT_TYPES:
        out, n_in = shape
        return {p: out * row_words(dtype, n_in, p) * 4 for p in ("q", "s")}
    return {"data": math.prod(shape) * (4 if dtype == "f32" or len(shape) == 1 else 2)}


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
    if dtype in SPLIT_TYPES:
        return PackedWeight(dtype, tuple(shape), quant_k.pack(raw, dtype, shape))
    if dtype == "mxfp4":
        return PackedWeight(dtype, tuple(shape), mxfp4.pack(raw, shape))
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
    elif dtype == "q5_0":  # GGUF: d, qh[4], qs[16] -> words qs0..qs3, qh
        q = np.concatenate([blocks[:, :, 6:22], blocks[:, :, 2:6]], axis=2)
    else:
        raise ValueError(f"no block packing for {dtype}")
    qw = np.ascontiguousarray(q).view(np.uint32).reshape(out, nb * WORDS_PER_BLOCK[dtype])
    return PackedWeight(dtype, (out, n_in), {"q": qw, "s": np.ascontiguousarray(d)})


def pack_mxfp4_as(raw: np.ndarray, dtype: str, shape: tuple[int, int]) -> PackedWeight:
    """MXFP4 blocks (uint8 [out, in / 32 * 17]) as the dtype mxfp4.load_dtype chose for them."""
    if dtype == "mxfp4":
        return pack_gguf_blocks(raw, dtype, shape)
    return pack_float(mxfp4.dequantize(raw).reshape(shape), "f32")


def quantize(a: np.ndarray, dtype: str) -> PackedWeight:
    """f32 [out, in] -> packed, through the gguf package's reference quantizer (as llama.cpp)."""
    if dtype in FLOAT_TYPES:
        return pack_float(a, dtype)
    if dtype in SPLIT_TYPES:  # gguf.quants has no K-quant / iq4_nl quantizer: quant_k's simple one
        return pack_gguf_blocks(quant_k.quantize_raw(a, dtype), dtype, a.shape)
    import gguf
    from gguf import quants

    raw = quants.quantize(np.ascontiguousarray(a, dtype=np.float32), gguf.GGMLQuantizationType[dtype.upper()])
    return pack_gguf_blocks(raw, dtype, a.shape)


def dequantize(w: PackedWeight) -> np.ndarray:
    if w.dtype == "f32":
        return w.parts["data"]
    if w.dtype == "f16":
        return w.parts["data"].view(np.float16).astype(np.float32).reshape(w.shape)
    if w.dtype in SPLIT_TYPES:
        return quant_k.dequantize(w.parts, w.dtype, w.shape)
    if w.dtype == "mxfp4":
        return mxfp4.dequantize(mxfp4.to_raw(w.parts, w.shape)).reshape(w.shape)
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

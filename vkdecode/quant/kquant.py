"""GPU word layout of the 256-element K-quant superblocks (q2_k .. q6_k) and of the extra
32-element blocks (q5_1, iq4_nl); see blocks.py's header for the whole layout and the why.

Each dtype is a list of byte ranges of the GGUF block that go to the q words and to the s words,
so packing is a byte split with no arithmetic (no f32 expansion, nothing recomputed) and
unpacking (to_raw) gives back the file's bytes: the reference dequantizes those with the gguf
package's own dequantize, the authority on what the bytes mean.

The quantizers here (quantize_raw) exist for tests and benchmarks only, because gguf.quants has
no K-quant / IQ4_NL quantizer: they are simple (max-abs / min-max per sub-block, 6- or 8-bit
scales, nearest level), valid GGUF blocks, not llama.cpp's error-minimising search.
"""

from __future__ import annotations

import numpy as np

QK = 256
# dtype: (elements per block, GGUF bytes per block, q byte ranges, s byte ranges, s pad bytes)
LAYOUTS = {
    # d, dmin, scales[12], qs[128]  ->  q: qs (32 words); s: d|dmin, scales (4 words)
    "q4_k": (QK, 144, [(16, 144)], [(0, 16)], 0),
    # d, dmin, scales[12], qh[32], qs[128]  ->  q: qs, qh (40 words); s: as q4_k
    "q5_k": (QK, 176, [(48, 176), (16, 48)], [(0, 16)], 0),
    # ql[128], qh[64], scales[16] (int8), d  ->  q: ql, qh (48 words); s: scales, d, 2-byte pad (5 words)
    "q6_k": (QK, 210, [(0, 192)], [(192, 210)], 2),
    # scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin  ->  q: qs (16 words); s: scales, d|dmin
    "q2_k": (QK, 84, [(16, 80)], [(0, 16), (80, 84)], 0),
    # hmask[32], qs[64], scales[12] (6-bit, packed), d  ->  q: hmask, qs (24 words); s: scales, d, pad
    "q3_k": (QK, 110, [(0, 96)], [(96, 110)], 2),
    # d, m, qh[4], qs[16]  ->  q: qs, qh (5 words, as q5_0); s: d|m
    "q5_1": (32, 24, [(8, 24), (4, 8)], [(0, 4)], 0),
    # d, qs[16]  ->  q: qs (4 words, as q4_0); s: d (2-byte pad)
    "iq4_nl": (32, 18, [(2, 18)], [(0, 2)], 2),
}
IQ4_NL_VALUES = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.float32
)


def _span(ranges) -> int:
    return sum(b - a for a, b in ranges)


def block_words(dtype: str) -> tuple[int, int, int]:
    """(elements per block, q words per block, s words per block)."""
    n, _, qr, sr, pad = LAYOUTS[dtype]
    return n, _span(qr) // 4, (_span(sr) + pad) // 4


def pack(raw: np.ndarray, dtype: str, shape: tuple[int, int]) -> dict[str, np.ndarray]:
    """raw: uint8 [out, nblocks * block bytes] as the file stores it -> {"q", "s"} uint32 words."""
    n, nbytes, qr, sr, pad = LAYOUTS[dtype]
    out, n_in = shape
    if n_in % n:
        raise ValueError(f"{dtype} needs an in-dim that is a multiple of {n}, got {shape}")
    nb = n_in // n
    blocks = np.ascontiguousarray(raw, dtype=np.uint8).reshape(out, nb, nbytes)
    q = np.concatenate([blocks[:, :, a:b] for a, b in qr], axis=2)
    s = [blocks[:, :, a:b] for a, b in sr] + ([np.zeros((out, nb, pad), np.uint8)] if pad else [])
    s = np.concatenate(s, axis=2)
    return {
        "q": np.ascontiguousarray(q).view(np.uint32).reshape(out, -1),
        "s": np.ascontiguousarray(s).view(np.uint32).reshape(out, -1),
    }


def to_raw(parts: dict[str, np.ndarray], dtype: str, shape: tuple[int, int]) -> np.ndarray:
    """The inverse of pack: the GGUF bytes, uint8 [out, nblocks * block bytes]."""
    n, nbytes, qr, sr, _ = LAYOUTS[dtype]
    out, n_in = shape
    nb = n_in // n
    q = parts["q"].view(np.uint8).reshape(out, nb, -1)
    s = parts["s"].view(np.uint8).reshape(out, nb, -1)
    raw = np.zeros((out, nb, nbytes), np.uint8)
    o = 0
    for a, b in qr:
        raw[:, :, a:b] = q[:, :, o : o + b - a]
        o += b - a
    o = 0
    for a, b in sr:
        raw[:, :, a:b] = s[:, :, o : o + b - a]
        o += b - a
    return raw.reshape(out, nb * nbytes)


def dequantize(parts: dict[str, np.ndarray], dtype: str, shape: tuple[int, int]) -> np.ndarray:
    import gguf

    raw = to_raw(parts, dtype, shape)
    a = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[dtype.upper()])
    return np.asarray(a, np.float32).reshape(shape)


# ---------------------------------------------------------------- test / bench quantizers


def _f16(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.astype(np.float16)).view(np.uint8).reshape(*a.shape[:-1], -1)


def _nibbles(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return (lo.astype(np.uint8) & 0xF) | (hi.astype(np.uint8) << 4)


def _scales6(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """8 six-bit scales and mins per superblock -> the 12 packed bytes (inverse of get_scale_min)."""
    sc, m = sc.astype(np.uint8), m.astype(np.uint8)
    b = np.zeros(sc.shape[:-1] + (12,), np.uint8)
    b[..., 0:4] = (sc[..., 0:4] & 63) | ((sc[..., 4:8] >> 4) << 6)
    b[..., 4:8] = (m[..., 0:4] & 63) | ((m[..., 4:8] >> 4) << 6)
    b[..., 8:12] = (sc[..., 4:8] & 15) | ((m[..., 4:8] & 15) << 4)
    return b


def _quantize_kmin(x: np.ndarray, levels: int):
    """x [..., 8, 32] -> (d f16, dmin f16, sc [...,8], m [...,8], q [..., 8, 32]) with
    value = d*sc*q - dmin*m, q in 0..levels, sc and m 6-bit."""
    lo = np.minimum(x.min(axis=-1), 0.0)
    scale = (x.max(axis=-1) - lo) / levels
    d = (scale.max(axis=-1) / 63).astype(np.float16)
    dmin = ((-lo).max(axis=-1) / 63).astype(np.float16)
    df, mf = d.astype(np.float32)[..., None], dmin.astype(np.float32)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.rint(np.where(df > 0, scale / df, 0)), 0, 63)
        m = np.clip(np.rint(np.where(mf > 0, -lo / mf, 0)), 0, 63)
        step = (df * sc)[..., None]
        q = np.where(step > 0, np.rint((x + (mf * m)[..., None]) / step), 0)
    return d, dmin, sc, m, np.clip(q, 0, levels).astype(np.uint8)


def quantize_raw(a: np.ndarray, dtype: str) -> np.ndarray:
    """f32 [out, in] -> GGUF block bytes uint8 [out, in / n * bytes] (simple quantizer, see top)."""
    a = np.ascontiguousarray(a, np.float32)
    if dtype not in LAYOUTS:
        import gguf

        return gguf.quants.quantize(a, gguf.GGMLQuantizationType[dtype.upper()])
    out, n_in = a.shape
    nb = n_in // LAYOUTS[dtype][0]
    if dtype in ("q4_k", "q5_k"):
        x = a.reshape(out, nb, 8, 32)
        d, dmin, sc, m, q = _quantize_kmin(x, 15 if dtype == "q4_k" else 31)
        chunks = q.reshape(out, nb, 4, 2, 32)  # 64-element chunk c: sub-blocks 2c (low), 2c+1 (high)
        qs = _nibbles(chunks[:, :, :, 0], chunks[:, :, :, 1]).reshape(out, nb, 128)
        head = [_f16(d[..., None]), _f16(dmin[..., None]), _scales6(sc, m)]
        if dtype == "q5_k":  # qh byte l, bit j: fifth bit of element 32 j + l
            bits = (q.reshape(out, nb, 8, 32) >> 4) & 1
            qh = np.zeros((out, nb, 32), np.uint8)
            for j in range(8):
                qh |= (bits[:, :, j] << j).astype(np.uint8)
            head.append(qh)
        return np.concatenate(head + [qs], axis=2).reshape(out, -1)
    if dtype == "q6_k":
        x = a.reshape(out, nb, 16, 16)
        amax = np.abs(x).max(axis=-1)
        d = (amax.max(axis=-1) / 31 / 127).astype(np.float16)
        df = d.astype(np.float32)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.clip(np.rint(np.where(df > 0, amax / 31 / df, 0)), -128, 127)
            step = (df * sc)[..., None]
            q = np.where(step > 0, np.rint(x / step), 0)
        q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(out, nb, 2, 4, 32)  # half, quarter, l
        ql = np.concatenate(
            [_nibbles(q[:, :, :, 0], q[:, :, :, 2]), _nibbles(q[:, :, :, 1], q[:, :, :, 3])], axis=3
        )
        qh = sum(((q[:, :, :, k] >> 4) & 3) << (2 * k) for k in range(4)).astype(np.uint8)
        parts = [
            ql.reshape(out, nb, 128),
            qh.reshape(out, nb, 64),
            sc.astype(np.int8).view(np.uint8),
            _f16(d[..., None]),
        ]
        return np.concatenate(parts, axis=2).reshape(out, -1)
    if dtype == "q2_k":
        x = a.reshape(out, nb, 16, 16)
        lo = np.minimum(x.min(axis=-1), 0.0)
        scale = (x.max(axis=-1) - lo) / 3
        d = (scale.max(axis=-1) / 15).astype(np.float16)
        dmin = ((-lo).max(axis=-1) / 15).astype(np.float16)
        df, mf = d.astype(np.float32)[..., None], dmin.astype(np.float32)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.clip(np.rint(np.where(df > 0, scale / df, 0)), 0, 15)
            m = np.clip(np.rint(np.where(mf > 0, -lo / mf, 0)), 0, 15)
            step = (df * sc)[..., None]
            q = np.where(step > 0, np.rint((x + (mf * m)[..., None]) / step), 0)
        q = np.clip(q, 0, 3).astype(np.uint8).reshape(out, nb, 2, 4, 32)  # half, shift j, l
        qs = sum(q[:, :, :, j] << (2 * j) for j in range(4)).astype(np.uint8).reshape(out, nb, 64)
        scales = sc.astype(np.uint8) | (m.astype(np.uint8) << 4)
        return np.concatenate([scales, qs, _f16(d[..., None]), _f16(dmin[..., None])], axis=2).reshape(
            out, -1
        )
    if dtype == "q3_k":
        x = a.reshape(out, nb, 16, 16)
        amax = np.abs(x).max(axis=-1)
        d = (amax.max(axis=-1) / 4 / 31).astype(np.float16)
        df = d.astype(np.float32)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            sc = np.clip(np.rint(np.where(df > 0, amax / 4 / df, 0)), -32, 31)
            step = (df * sc)[..., None]
            q = np.where(step > 0, np.rint(x / step), 0)
        u = (np.clip(q, -4, 3) + 4).astype(np.uint8).reshape(out, nb, 8, 32)  # element 32k + l
        hmask = sum((u[:, :, k] >> 2) << k for k in range(8)).astype(np.uint8)
        ql = (u & 3).reshape(out, nb, 2, 4, 32)
        qs = sum(ql[:, :, :, j] << (2 * j) for j in range(4)).astype(np.uint8).reshape(out, nb, 64)
        s6 = (sc + 32).astype(np.uint8)  # scale i: 6 bits
        sb = np.zeros((out, nb, 12), np.uint8)
        for i in range(16):
            sb[:, :, i % 8] |= (s6[:, :, i] & 15) << (4 * (i // 8))
            sb[:, :, 8 + i % 4] |= (s6[:, :, i] >> 4) << (2 * (i // 4))
        return np.concatenate([hmask, qs, sb, _f16(d[..., None])], axis=2).reshape(out, -1)
    if dtype == "iq4_nl":
        x = a.reshape(out, nb, 32)
        d = (np.abs(x).max(axis=-1) / 127).astype(np.float16)
        df = d.astype(np.float32)[..., None]
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(df > 0, x / df, 0)
        q = np.abs(y[..., None] - IQ4_NL_VALUES).argmin(axis=-1).astype(np.uint8)
        qs = _nibbles(q[..., :16], q[..., 16:])
        return np.concatenate([_f16(d[..., None]), qs], axis=2).reshape(out, -1)
    import gguf

    return gguf.quants.quantize(a, gguf.GGMLQuantizationType[dtype.upper()])  # q5_1

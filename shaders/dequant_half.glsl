// dequant_half(rw, rs, i): elements i .. i + 3 (i % 4 == 0) of the weight row whose words start at
// rw (scales at rs) as four f16, two a word (element i in the low half of .x), for the tensor-core
// tile loaders; include after dequant.glsl, which it defines HALF_QUADS beside for the dtypes it
// decodes (f16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k, mxfp4).
// Why: the tiles are f16, and dequant_quad's f32 decode costs an int-to-float and an f32-to-f16
// conversion an element, which NVIDIA's throughput tables put at 16 an SM a clock (an eighth of
// its f32 FMAs). Here the quant fields are ORed into the mantissa of 1024.0hf (exact for fields <
// 1024), the offset is subtracted in f16, and the scale applied by f16 FMAs: no conversion
// instruction at all (H200, Qwen3-30B-A3B's grouped expert matmuls over 512 rows: q4_k gate 329 ->
// 311 us, q6_k down 370 -> 308). Where the scale is a product (K-quants: d times the sub-block's
// scale, and the min likewise) it is carried as an f16 pair, rounded value and remainder (an FMA
// gives the remainder exactly), so that a min that cancels most of q * scale does not leave the
// scale's rounding behind: with one FMA of an exact product, an element is its correctly rounded
// f16 or next to it where FMAs are fused (NVIDIA's HFMA2; lavapipe rounds the product first).
#if defined(DT_F16) || defined(DT_Q8_0) || defined(DT_Q4_0) || defined(DT_Q4_1) || defined(DT_Q4_K) || defined(DT_Q5_K) \
    || defined(DT_Q6_K) || defined(DT_MXFP4)
#define HALF_QUADS 1

// Fields < 1024 at bits 0 and 16 of pair, as exact f16 (minus off, exact for integral off < 1024).
f16vec2 h2(uint pair, float16_t off) { return unpackFloat2x16(pair | 0x64006400u) - f16vec2(1024.0hf + off); }
// Bytes 0 .. 3 of t as 16-bit fields: (byte 0, byte 1) and (byte 2, byte 3).
uvec2 spread(uint t) { return uvec2((t & 0xFFu) | ((t & 0xFF00u) << 8), ((t >> 16) & 0xFFu) | ((t >> 8) & 0xFF0000u)); }
// The four bytes of t (each < 1024 - off), minus off, times s, plus a.
uvec2 scaled4(uint t, float16_t off, float16_t s, float16_t a) {
    const uvec2 p = spread(t);
    return uvec2(packFloat2x16(fma(h2(p.x, off), f16vec2(s), f16vec2(a))),
                 packFloat2x16(fma(h2(p.y, off), f16vec2(s), f16vec2(a))));
}
// The same with s = sh + sl and a = ah + al (value and remainder pairs): (q sh + ah) + (q sl + al).
f16vec2 fma2(f16vec2 q, f16vec2 sa, f16vec2 lo) { return fma(q, sa.xx, sa.yy) + fma(q, lo.xx, lo.yy); }
uvec2 scaled4x2(uint t, float16_t off, f16vec2 sa, f16vec2 lo) {
    const uvec2 p = spread(t);
    return uvec2(packFloat2x16(fma2(h2(p.x, off), sa, lo)), packFloat2x16(fma2(h2(p.y, off), sa, lo)));
}

#ifdef DT_MXFP4
// Two e2m1 nibbles at bits 0 and 16 of p as the f16 pair of their values (above: all normal).
uint e2m1_half2(uint p) {
    const uint ones = 0x00010001u, nonzero = (p | (p >> 1) | (p >> 2)) & ones, e_set = ((p >> 1) | (p >> 2)) & ones;
    const uint bits = ((p & 0x00080008u) << 12) | (((p & 0x00060006u) << 9) + 0x38003800u) | ((p & e_set) << 9);
    return bits & (nonzero * 0xFFFFu);
}
#endif

uvec2 dequant_half(uint rw, uint rs, uint i) {
#if defined(DT_F16)
    return uvec2(w_u[rw + i / 2], w_u[rw + i / 2 + 1]);
#elif defined(DT_Q6_K)
    const uint b = i / 256, e = i % 256, n = e / 128, r = e % 128, l = r % 64, hi = r / 64, sc = 8 * n + r / 16;
    const uint q = (w_u[rw + 48 * b + 16 * n + l / 4] >> (4 * hi)) & 0x0F0F0F0Fu;
    const uint h = (w_u[rw + 48 * b + 32 + 8 * n + (l % 32) / 4] >> (2 * (l / 32) + 4 * hi)) & 0x03030303u;
    // the int8 scale, offset by 128 to a field < 256
    const uint s8 = ((w_s[rs + 5 * b + sc / 4] >> (8 * (sc % 4))) & 0xFFu) ^ 0x80u;
    const float16_t d = unpackFloat2x16(w_s[rs + 5 * b + 4]).x, sc8 = h2(s8, 128.0hf).x, s = d * sc8;
    return scaled4x2(q | (h << 4), 32.0hf, f16vec2(s, 0.0hf), f16vec2(fma(d, sc8, -s), 0.0hf));
#elif defined(DT_Q4_K) || defined(DT_Q5_K)
    const uint b = i / 256, e = i % 256, c = e / 64, hi = (e % 64) / 32, l = e % 32;
    const uvec4 sw = w_s4[rs / 4 + b];
    const f16vec2 dm = unpackFloat2x16(sw.x);
    const uvec2 scm = (k4_scale_min(sw, c) >> (8 * hi)) & 0xFFu;
    const f16vec2 scmn = h2(scm.x | (scm.y << 16), 0.0hf), sm = dm * scmn, lo = fma(dm, scmn, -sm);
#if defined(DT_Q5_K)
    uint q = (w_u[rw + 40 * b + 8 * c + l / 4] >> (4 * hi)) & 0x0F0F0F0Fu;
    q |= ((w_u[rw + 40 * b + 32 + l / 4] >> (2 * c + hi)) & 0x01010101u) << 4;
#else
    const uint q = (w_u[rw + 32 * b + 8 * c + l / 4] >> (4 * hi)) & 0x0F0F0F0Fu;
#endif
    return scaled4x2(q, 0.0hf, f16vec2(sm.x, -sm.y), f16vec2(lo.x, -lo.y));
#elif defined(DT_MXFP4)
    // Each e2m1 nibble (sign, e1 e0, m) as a normal f16 (no f16 subnormal, which a device may flush
    // when it is an input): exponent field e + 14 and mantissa bit m, except the level 0.5 (e 0,
    // m 1), which is 2^-1 (exponent field 14, mantissa 0), and zero; then one f16 multiply by the
    // block's 2^(x - 127) (E8M0 byte x; the doubled KVALUES' 2^(x - 128) halved), built from bits:
    // normal from x 113, subnormal down to x 103 (2^-24), 0 below (values under 12 * 2^-25 flush,
    // as f16 rounding would). So an element is its value correctly rounded to f16. x is capped at
    // 140 (quant/mxfp4.py E_KERNEL: a block past it with nonzero levels never reaches the device).
    const uint b = i / 32, e = i % 32;
    const uvec2 p = spread((w_u[rw + 4 * b + (e % 16) / 4] >> (4 * (e / 16))) & 0x0F0F0F0Fu);
    const uint x = min((w_s[rs + b / 4] >> (8 * (b % 4))) & 0xFFu, 140u);
    const f16vec2 s = f16vec2(unpackFloat2x16(x >= 113u ? (x - 112u) << 10 : (x >= 103u ? 1u << (x - 103u) : 0u)).x);
    return uvec2(packFloat2x16(unpackFloat2x16(e2m1_half2(p.x)) * s), packFloat2x16(unpackFloat2x16(e2m1_half2(p.y)) * s));
#else
    const uint b = i / 32, e = i % 32;
    const f16vec2 dm = unpackFloat2x16(w_s[rs + b]);
#if defined(DT_Q8_0)
    return scaled4(w_u[rw + 8 * b + e / 4] ^ 0x80808080u, 128.0hf, dm.x, 0.0hf);
#else
    const uint q = (w_u[rw + BLOCK_WORDS * b + (e % 16) / 4] >> (4 * (e / 16))) & 0x0F0F0F0Fu;
#if defined(DT_Q4_0)
    return scaled4(q, 8.0hf, dm.x, 0.0hf);
#else
    return scaled4(q, 0.0hf, dm.x, dm.y);
#endif
#endif
#endif
}
#endif

// dequant_quad(rw, rs, i): elements i .. i + 3 (i % 4 == 0) of the row whose words start at rw
// (scales at rs), for every dtype dequant.glsl knows; include after it. The dtypes without a
// unit_weights decode (K-quants, q5_1, iq4_nl) and in-dims off the 32-step are decoded by the
// chunk matmul's tile loader element by element otherwise (dequant_elem): four consecutive
// elements share their quant word (a byte lane each), scale and min, so a quad costs about what
// one element did. Same arithmetic per element as dequant_elem, so the results are identical.

vec4 dequant_quad(uint rw, uint rs, uint i) {
#if defined(DT_F32)
    return vec4(w_f[rw + i], w_f[rw + i + 1], w_f[rw + i + 2], w_f[rw + i + 3]);
#elif defined(DT_F16)
    return vec4(unpackHalf2x16(w_u[rw + i / 2]), unpackHalf2x16(w_u[rw + i / 2 + 1]));
#elif defined(DT_Q2_K) || defined(DT_Q3_K)
    const uint b = i / 256, e = i % 256, h = e / 128, j = (e % 128) / 32, l = e % 32, sub = e / 16;
#if defined(DT_Q2_K)
    const vec4 q = vec4(bytebits(w_u[rw + 16 * b + 8 * h + l / 4], 2 * j, 3u));
    const uint sb = (w_s[rs + 5 * b + sub / 4] >> (8 * (sub % 4))) & 0xFFu;
    const vec2 dm = unpackHalf2x16(w_s[rs + 5 * b + 4]);
    return dm.x * float(sb & 0xFu) * q - dm.y * float(sb >> 4);
#else
    const uvec4 q = bytebits(w_u[rw + 24 * b + 8 + 8 * h + l / 4], 2 * j, 3u);
    const uvec4 hb = bytebits(w_u[rw + 24 * b + l / 4], e / 32, 1u);
    const uvec4 sw = w_s4[rs / 4 + b];
    return unpackHalf2x16(sw.w).x * float(k3_scale(sw, sub)) * (vec4(q | (hb << 2)) - 4.0);
#endif
#elif defined(DT_Q6_K)
    const uint b = i / 256, e = i % 256, n = e / 128, r = e % 128, l = r % 64, hi = r / 64;
    const uvec4 q = bytebits(w_u[rw + 48 * b + 16 * n + l / 4], 4 * hi, 0xFu);
    const uvec4 h = bytebits(w_u[rw + 48 * b + 32 + 8 * n + (l % 32) / 4], 2 * (l / 32) + 4 * hi, 3u);
    const uint sc = 8 * n + r / 16;
    const float d = unpackHalf2x16(w_s[rs + 5 * b + 4]).x;
    return d * float(bitfieldExtract(int(w_s[rs + 5 * b + sc / 4]), int(8 * (sc % 4)), 8)) * (vec4(q | (h << 4)) - 32.0);
#elif defined(KQUANT)
    const uint b = i / 256, e = i % 256, c = e / 64, hi = (e % 64) / 32, l = e % 32;
    const uvec4 sw = w_s4[rs / 4 + b];
    const vec2 dm = unpackHalf2x16(sw.x);
    const uvec2 scm = k4_scale_min(sw, c) >> (8 * hi);
#if defined(DT_Q5_K)
    const uvec4 q = bytebits(w_u[rw + 40 * b + 8 * c + l / 4], 4 * hi, 0xFu)
                  | (bytebits(w_u[rw + 40 * b + 32 + l / 4], 2 * c + hi, 1u) << 4);
#else
    const uvec4 q = bytebits(w_u[rw + 32 * b + 8 * c + l / 4], 4 * hi, 0xFu);
#endif
    return dm.x * float(scm.x & 0xFFu) * vec4(q) - dm.y * float(scm.y & 0xFFu);
#else
    const uint b = i / 32, e = i % 32;
    const vec2 dm = block_dm(rs, b);
#if defined(DT_Q8_0)
    return dm.x * i8x4(w_u[rw + 8 * b + e / 4]);
#else
    const uint j = e % 16;
    uvec4 n = bytebits(w_u[rw + BLOCK_WORDS * b + j / 4], 4 * (e / 16), 0xFu);
#if defined(DT_Q4_0)
    return dm.x * (vec4(n) - 8.0);
#elif defined(DT_Q4_1)
    return dm.x * vec4(n) + dm.y;
#elif defined(DT_IQ4_NL) || defined(DT_MXFP4)
    return dm.x * vec4(NL16(n.x), NL16(n.y), NL16(n.z), NL16(n.w));
#else
    const uint qh = w_u[rw + 5 * b + 4];
    n |= (uvec4(qh >> e, qh >> (e + 1), qh >> (e + 2), qh >> (e + 3)) & 1u) << 4;
#if defined(DT_Q5_1)
    return dm.x * vec4(n) + dm.y;
#else
    return dm.x * (vec4(n) - 16.0);
#endif
#endif
#endif
#endif
}

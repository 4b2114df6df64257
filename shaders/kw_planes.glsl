// The per-half x arithmetic of split wide q4_k / q6_k units on integer dot products (dequant.glsl
// KQ_IDOT), shared by dequant.glsl (x made in registers per unit) and xplanes.comp (made once a
// batched step), so both give the same bits.
#ifndef KW_PLANES_GLSL
#define KW_PLANES_GLSL
// the sum of a half unit's 16 activations (dequant.glsl kw_xsum)
float kw_xsum16(vec4 x[4]) {
    const vec4 s = (x[0] + x[1]) + (x[2] + x[3]);
    return (s.x + s.y) + (s.z + s.w);
}
// the same adds where x was just computed (rms_norm.comp / silu_mul.comp XPLANES): precise, so
// its products do not fuse into them (lavapipe's did, changing the sum's bits); x loaded from
// memory, as the matvecs and xplanes.comp take it, has nothing to fuse. Not in kw_xsum16: the
// single-row fused kernels (x normed in registers) keep their code.
float kw_xsum16_exact(vec4 x[4]) {
    precise const vec4 s = (x[0] + x[1]) + (x[2] + x[3]);
    precise const float r = (s.x + s.y) + (s.z + s.w);
    return r;
}
// KQ_PLANES (calls.planes_defines): 2, x rounded to 16 bits of its group's largest |x|, two dot
// products a q word; 3, 22 bits, three. 2: a batched step's K-quant matvecs are bound by these dot
// products from 4 rows (calls.x_planes).
#ifndef KQ_PLANES
#define KQ_PLANES 2
#endif
// x's 16 activations as KQ_PLANES byte planes p[k] (word i, byte j: element j of x[i], as the q
// words pair them); returns 2^-s. x 2^s + 1.5 2^23 puts 2^22 + xi, rounded to nearest even, in
// the float's 23 mantissa bits (bit 23, the exponent's lowest, is 0). Three planes: |xi| <= 2^21,
// bytes 0 and 1 are planes 0 and 1 (unsigned), byte 2 minus 64 is plane 2 (signed, -32..32).
// Two: |xi| <= 2^15 - 1, byte 0 is plane 0 (unsigned), byte 1 plane 1 (signed: xi's high byte in
// two's complement). An inf or NaN in x makes 2^-s NaN, so the dot is NaN in either form.
float kw_planes(vec4 x[4], out uvec4 p[KQ_PLANES]) {
    const vec4 a = max(max(abs(x[0]), abs(x[1])), max(abs(x[2]), abs(x[3])));
    // biased exponent e of the largest |x| (< 2^(e - 126)); at least 21, so both powers are normal
    const uint e = max(floatBitsToUint(max(max(a.x, a.y), max(a.z, a.w))) >> 23, 21u);
#if KQ_PLANES == 3
    const uint top = 147u;      // 2^(147 - e): |x| sc < 2^21
#else
    const uint top = 141u;      // |x| sc < 2^15, clamped below to the high byte's +-127
#endif
    const float sc = uintBitsToFloat((top + 127u - e) << 23);
    for (uint i = 0; i < 4; i++) {
#if KQ_PLANES == 3
        const uvec4 m = floatBitsToUint(x[i] * sc + 12582912.0);
#else
        const uvec4 m = floatBitsToUint(clamp(x[i] * sc, -32767.0, 32767.0) + 12582912.0);
#endif
        p[0][i] = (m.x & 0xFFu) | ((m.y & 0xFFu) << 8) | ((m.z & 0xFFu) << 16) | (m.w << 24);
        const uint b1 = ((m.x >> 8) & 0xFFu) | (m.y & 0xFF00u) | ((m.z << 8) & 0xFF0000u) | ((m.w << 16) & 0xFF000000u);
#if KQ_PLANES == 3
        p[1][i] = b1;
        const uint t = (((m.x >> 16) & 0xFFu) | ((m.y >> 8) & 0xFF00u) | (m.z & 0xFF0000u)
                        | ((m.w << 8) & 0xFF000000u)) ^ 0x40404040u;
        p[2][i] = t | ((t << 1) & 0x80808080u);    // each byte b - 64 as a signed byte
#else
        p[1][i] = b1;   // bits 8..15 of 2^22 + xi: xi's high byte in two's complement
#endif
    }
    // 2^(e - top); NaN where x holds an inf or a NaN, which the float kernel would pass on too
    return e < 255u ? uintBitsToFloat((e + 127u - top) << 23) : uintBitsToFloat(0x7FC00000u);
}
// Store group g of row r (G groups a row, R rows) of x's planes, as matmul.comp's KW_XP reads
// them: uvec4 planes p4[(KQ_PLANES r + k) G + g], k < KQ_PLANES, then vec2 (2^-s, xsum)
// pf[2 KQ_PLANES R G + r G + g], in the
// includer's buffers p4 / pf (one binding, two views). The one writer of the layout: xplanes.comp,
// rms_norm.comp and silu_mul.comp (XPLANES).
#define KW_PLANES_STORE(x, r, g, G, R, xsum) { \
    uvec4 kw_p[KQ_PLANES]; \
    const float kw_inv = kw_planes(x, kw_p); \
    for (uint kw_k = 0; kw_k < KQ_PLANES; kw_k++) p4[(KQ_PLANES * (r) + kw_k) * (G) + (g)] = kw_p[kw_k]; \
    pf[2u * KQ_PLANES * (R) * (G) + (r) * (G) + (g)] = vec2(kw_inv, xsum); \
}
#endif

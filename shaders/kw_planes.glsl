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
// x's 16 activations as three byte planes p[0..2] (word i, byte k: element k of x[i], as the q
// words pair them); returns 2^-s. x 2^s + 1.5 2^23 puts 2^22 + xi, rounded to nearest even, in
// the float's 23 mantissa bits (bit 23, the exponent's lowest, is 0): bytes 0 and 1 of it are
// planes 0 and 1 (unsigned), byte 2 minus 64 is plane 2 (signed, -32..32).
float kw_planes(vec4 x[4], out uvec4 p[3]) {
    const vec4 a = max(max(abs(x[0]), abs(x[1])), max(abs(x[2]), abs(x[3])));
    // biased exponent e of the largest |x| (< 2^(e - 126)); at least 21, so both powers are normal
    const uint e = max(floatBitsToUint(max(max(a.x, a.y), max(a.z, a.w))) >> 23, 21u);
    const float sc = uintBitsToFloat((274u - e) << 23);      // 2^(147 - e): |x| sc < 2^21
    for (uint i = 0; i < 4; i++) {
        const uvec4 m = floatBitsToUint(x[i] * sc + 12582912.0);
        p[0][i] = (m.x & 0xFFu) | ((m.y & 0xFFu) << 8) | ((m.z & 0xFFu) << 16) | (m.w << 24);
        p[1][i] = ((m.x >> 8) & 0xFFu) | (m.y & 0xFF00u) | ((m.z << 8) & 0xFF0000u) | ((m.w << 16) & 0xFF000000u);
        const uint t = (((m.x >> 16) & 0xFFu) | ((m.y >> 8) & 0xFF00u) | (m.z & 0xFF0000u)
                        | ((m.w << 8) & 0xFF000000u)) ^ 0x40404040u;
        p[2][i] = t | ((t << 1) & 0x80808080u);    // each byte b - 64 as a signed byte
    }
    // 2^(e - 147); NaN where x holds an inf or a NaN, which the float kernel would pass on too
    return e < 255u ? uintBitsToFloat((e - 20u) << 23) : uintBitsToFloat(0x7FC00000u);
}
// Store group g of row r (G groups a row, R rows) of x's planes, as matmul.comp's KW_XP reads
// them: uvec4 planes p4[(3 r + k) G + g], k < 3, then vec2 (2^-s, xsum) pf[6 R G + r G + g], in the
// includer's buffers p4 / pf (one binding, two views). The one writer of the layout: xplanes.comp,
// rms_norm.comp and silu_mul.comp (XPLANES).
#define KW_PLANES_STORE(x, r, g, G, R, xsum) { \
    uvec4 kw_p[3]; \
    const float kw_inv = kw_planes(x, kw_p); \
    for (uint kw_k = 0; kw_k < 3; kw_k++) p4[(3u * (r) + kw_k) * (G) + (g)] = kw_p[kw_k]; \
    pf[6u * (R) * (G) + (r) * (G) + (g)] = vec2(kw_inv, xsum); \
}
#endif

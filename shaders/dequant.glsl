// Weight access for every weight dtype in vkdecode/quant.py's GPU word layout, shared by the
// matvec, embed and (later) fused kernels so they all decode blocks the same way.
//
// The includer defines one of DT_F32 DT_F16 DT_Q8_0 DT_Q4_0 DT_Q4_1 DT_Q5_0, the binding numbers
// B_W (data, or q words) and B_S (quant scales), and, for load_x, the activation fetches
// X1(i) (float at element i) and X4(i) (vec4 at vec4 index i). WVEC selects 16-byte weight loads
// for f32/f16 (kernels.py sets it when a row is a whole number of uvec4s).
//
// A "unit" is what one invocation reads per step: a uvec4 of f16 (8 values) or f32 (4), a single
// word/float otherwise, and 8 elements of a quant block (q8_0: a uvec2; q4/q5: one nibble word,
// its elements 4k..4k+3 and 16+4k..16+4k+3). Adjacent invocations take adjacent units, so both
// the weight and the activation loads of a subgroup are contiguous: with a whole block per
// invocation the 8 vec4 loads of x each touched a different cache line per invocation, and on an
// H100 the L1 wavefronts of x, not DRAM, capped quantised matvecs near 1/3 of bandwidth.

#if defined(DT_F32)
layout(binding = B_W) readonly buffer WF { float w_f[]; };
layout(binding = B_W) readonly buffer WF4 { vec4 w_f4[]; };
#define ROW_WORDS(k) (k)
#ifdef WVEC
#define UNIT_ELEMS 4
#else
#define UNIT_ELEMS 1
#endif
#else
layout(binding = B_W) readonly buffer WU { uint w_u[]; };
layout(binding = B_W) readonly buffer WU4 { uvec4 w_u4[]; };
#endif

#if defined(DT_F16)
#define ROW_WORDS(k) ((k) / 2)
#ifdef WVEC
#define UNIT_ELEMS 8
#else
#define UNIT_ELEMS 2
#endif
#endif

#if defined(DT_Q8_0) || defined(DT_Q4_0) || defined(DT_Q4_1) || defined(DT_Q5_0)
#define QUANT 1
#define UNIT_ELEMS 8
layout(binding = B_S) readonly buffer WS { uint w_s[]; };
layout(binding = B_W) readonly buffer WU2 { uvec2 w_u2[]; };
#if defined(DT_Q8_0)
#define ROW_WORDS(k) ((k) / 4)
#define BLOCK_WORDS 8
#elif defined(DT_Q5_0)
#define ROW_WORDS(k) ((k) / 32 * 5)
#define BLOCK_WORDS 5
#else
#define ROW_WORDS(k) ((k) / 8)
#define BLOCK_WORDS 4
#endif
#endif

vec4 i8x4(uint w) {
    int s = int(w);
    return vec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8), bitfieldExtract(s, 24, 8));
}
vec4 lo4(uint w) { return vec4(uvec4(w, w >> 8, w >> 16, w >> 24) & 0xFu); }
vec4 hi4(uint w) { return vec4(uvec4(w >> 4, w >> 12, w >> 20, w >> 28) & 0xFu); }
// Fifth bits of elements b..b+3 of a q5_0 block, already scaled to 16.
vec4 q5hi(uint qh, uint b) { return vec4(uvec4(qh >> b, qh >> (b + 1), qh >> (b + 2), qh >> (b + 3)) & 1u) * 16.0; }

#if defined(QUANT) || (defined(DT_F16) && defined(WVEC))
#define XU_VEC4 2
#else
#define XU_VEC4 1
#endif

#ifdef X4
// The activations unit u multiplies, loaded once and reused for every row a thread handles.
// Scalar units fill only the leading components.
void load_x(uint u, out vec4 xv[XU_VEC4]) {
#if defined(QUANT) && !defined(DT_Q8_0)
    uint b = u / 4, k = u % 4;   // nibble word k of block b: elements 4k.. and 16+4k..
    xv[0] = X4(8 * b + k);
    xv[1] = X4(8 * b + 4 + k);
#elif defined(QUANT) || defined(WVEC)
    for (uint j = 0; j < XU_VEC4; j++) xv[j] = X4(XU_VEC4 * u + j);
#elif defined(DT_F16)
    xv[0] = vec4(X1(2 * u), X1(2 * u + 1), 0.0, 0.0);
#else
    xv[0] = vec4(X1(u), 0.0, 0.0, 0.0);
#endif
}
#endif

// Dot product of unit u of the row whose words start at rw (scales at rs) with its activations.
float unit_dot(uint rw, uint rs, uint u, vec4 xv[XU_VEC4]) {
#if defined(DT_F32)
#ifdef WVEC
    return dot(w_f4[rw / 4 + u], xv[0]);
#else
    return w_f[rw + u] * xv[0].x;
#endif
#elif defined(DT_F16)
#ifdef WVEC
    uvec4 w = w_u4[rw / 4 + u];
    return dot(vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)), xv[0])
         + dot(vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w)), xv[1]);
#else
    return dot(unpackHalf2x16(w_u[rw + u]), xv[0].xy);
#endif
#else
    vec2 dm = unpackHalf2x16(w_s[rs + u / 4]);
#if defined(DT_Q8_0)
    uvec2 q = w_u2[rw / 2 + u];
    return dm.x * (dot(i8x4(q.x), xv[0]) + dot(i8x4(q.y), xv[1]));
#else
#if defined(DT_Q5_0)
    uint b = u / 4, k = u % 4;
    uint q = w_u[rw + 5 * b + k];
    uint qh = w_u[rw + 5 * b + 4];
    float s = dot(lo4(q) + q5hi(qh, 4 * k), xv[0]) + dot(hi4(q) + q5hi(qh, 16 + 4 * k), xv[1]);
#else
    uint q = w_u[rw + u];
    float s = dot(lo4(q), xv[0]) + dot(hi4(q), xv[1]);
#endif
    // The x sum is the same for every row, so the compiler keeps one copy per unit.
    vec4 x2 = xv[0] + xv[1];
    float xs = (x2.x + x2.y) + (x2.z + x2.w);
#if defined(DT_Q4_0)
    return dm.x * (s - 8.0 * xs);
#elif defined(DT_Q4_1)
    return dm.x * s + dm.y * xs;
#else
    return dm.x * (s - 16.0 * xs);
#endif
#endif
#endif
}

// Element i of the row whose words start at rw (scales at rs); used where a row is read once.
float dequant_elem(uint rw, uint rs, uint i) {
#if defined(DT_F32)
    return w_f[rw + i];
#elif defined(DT_F16)
    vec2 h = unpackHalf2x16(w_u[rw + i / 2]);
    return (i & 1u) == 0u ? h.x : h.y;
#else
    uint b = i / 32, e = i % 32;
    vec2 dm = unpackHalf2x16(w_s[rs + b]);
#if defined(DT_Q8_0)
    return dm.x * float(bitfieldExtract(int(w_u[rw + 8 * b + e / 4]), int(8 * (e % 4)), 8));
#else
    uint j = e % 16;
    uint n = (w_u[rw + BLOCK_WORDS * b + j / 4] >> (8 * (j % 4) + 4 * (e / 16))) & 0xFu;
#if defined(DT_Q4_0)
    return dm.x * (float(n) - 8.0);
#elif defined(DT_Q4_1)
    return dm.x * float(n) + dm.y;
#else
    n |= ((w_u[rw + 5 * b + 4] >> e) & 1u) << 4;
    return dm.x * (float(n) - 16.0);
#endif
#endif
#endif
}

#if defined(UNIT_WEIGHTS) && (defined(QUANT) || defined(WVEC))
// Tiled matmuls (matmul_rows.comp defines UNIT_WEIGHTS: fused kernels include this file once per
// weight slot, so the functions below exist only where asked for) decode a weight tile once into shared memory, a unit at a time:
// unit_weights returns the weights of unit u laid out as load_x lays out the activations they
// multiply (unit_dot(rw, rs, u, xv) == sum over j of dot(w[j], xv[j])), and unit_vec4(u, j) the
// index, in vec4s of the row, of component j (the elements 4 * unit_vec4(u, j) + 0..3).
uint unit_vec4(uint u, uint j) {
#if defined(QUANT) && !defined(DT_Q8_0)
    return 8 * (u / 4) + 4 * j + u % 4;
#else
    return XU_VEC4 * u + j;
#endif
}

void unit_weights(uint rw, uint rs, uint u, out vec4 w[XU_VEC4]) {
#if defined(DT_F32)
    w[0] = w_f4[rw / 4 + u];
#elif defined(DT_F16)
    uvec4 h = w_u4[rw / 4 + u];
    w[0] = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
    w[1] = vec4(unpackHalf2x16(h.z), unpackHalf2x16(h.w));
#else
    vec2 dm = unpackHalf2x16(w_s[rs + u / 4]);
#if defined(DT_Q8_0)
    uvec2 q = w_u2[rw / 2 + u];
    w[0] = dm.x * i8x4(q.x);
    w[1] = dm.x * i8x4(q.y);
#else
#if defined(DT_Q5_0)
    uint b = u / 4, k = u % 4;
    uint q = w_u[rw + 5 * b + k];
    uint qh = w_u[rw + 5 * b + 4];
    w[0] = dm.x * (lo4(q) + q5hi(qh, 4 * k) - 16.0);
    w[1] = dm.x * (hi4(q) + q5hi(qh, 16 + 4 * k) - 16.0);
#else
    uint q = w_u[rw + u];
#if defined(DT_Q4_0)
    w[0] = dm.x * (lo4(q) - 8.0);
    w[1] = dm.x * (hi4(q) - 8.0);
#elif defined(DT_Q4_1)
    w[0] = dm.x * lo4(q) + dm.y;
    w[1] = dm.x * hi4(q) + dm.y;
#else
#error "unit_weights: no unit decode for this dtype (kernels_rows.UNIT_DTYPES lists the ones with one)"
#endif
#endif
#endif
#endif
}
#endif

// Weight access for every weight dtype in vkdecode/quant/blocks.py's GPU word layout, shared by the
// matvec, embed and (later) fused kernels so they all decode blocks the same way.
//
// The includer defines one of DT_F32 DT_F16 DT_Q8_0 DT_Q4_0 DT_Q4_1 DT_Q5_0 DT_Q5_1 DT_IQ4_NL DT_MXFP4
// DT_Q4_K DT_Q5_K DT_Q6_K DT_Q2_K DT_Q3_K, the binding numbers
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
// K-quants keep that: a q4_k/q5_k unit is one qs word of a 64-element chunk c (elements
// 64c+4w.. low nibbles, 64c+32+4w.. high nibbles), a q6_k unit one ql word of a 128-element half
// (elements 4w.. and 64+4w..), a q2_k/q3_k unit two 2-bit planes of one qs word (elements
// 128h+64p+4w.. and 128h+64p+32+4w..), so 8 (q6_k: 16) adjacent invocations load contiguous x.
// ROW_WORDS(k) / ROW_SCALES(k): q and s words per row of in-dim k.

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

#if defined(DT_Q4_K) || defined(DT_Q5_K) || defined(DT_Q6_K) || defined(DT_Q2_K) || defined(DT_Q3_K)
#define KQUANT 1
#endif
#if defined(DT_Q8_0) || defined(DT_Q4_0) || defined(DT_Q4_1) || defined(DT_Q5_0) || defined(DT_Q5_1) || defined(DT_IQ4_NL) \
    || defined(DT_MXFP4) || defined(KQUANT)
#define QUANT 1
#if defined(KQUANT) && defined(WVEC)
// KWIDE: a K-quant unit of 32 elements, four of the 8-element units below that share their scales
// (kernels.matvec_shape sets WVEC for K-quants in the decode matvecs)
#define KWIDE 1
#define UNIT_ELEMS 32
#else
#define UNIT_ELEMS 8
#endif
layout(binding = B_S) readonly buffer WS { uint w_s[]; };
layout(binding = B_S) readonly buffer WS4 { uvec4 w_s4[]; };
layout(binding = B_W) readonly buffer WU2 { uvec2 w_u2[]; };
#if defined(DT_Q8_0)
#define ROW_WORDS(k) ((k) / 4)
#define BLOCK_WORDS 8
#elif defined(DT_Q5_0) || defined(DT_Q5_1)
#define ROW_WORDS(k) ((k) / 32 * 5)
#define BLOCK_WORDS 5
#elif defined(DT_Q4_K)
#define ROW_WORDS(k) ((k) / 8)
#define ROW_SCALES(k) ((k) / 64)
#elif defined(DT_Q5_K)
#define ROW_WORDS(k) ((k) / 256 * 40)
#define ROW_SCALES(k) ((k) / 64)
#elif defined(DT_Q6_K)
#define ROW_WORDS(k) ((k) / 256 * 48)
#define ROW_SCALES(k) ((k) / 256 * 5)
#elif defined(DT_Q2_K)
#define ROW_WORDS(k) ((k) / 16)
#define ROW_SCALES(k) ((k) / 256 * 5)
#elif defined(DT_Q3_K)
#define ROW_WORDS(k) ((k) / 256 * 24)
#define ROW_SCALES(k) ((k) / 64)
#elif defined(DT_MXFP4)
#define ROW_WORDS(k) ((k) / 8)
#define BLOCK_WORDS 4
#define ROW_SCALES(k) (((k) + 127) / 128)   // an E8M0 byte a block, a row padded to whole words
#else
#define ROW_WORDS(k) ((k) / 8)
#define BLOCK_WORDS 4
#endif
#ifndef ROW_SCALES
#define ROW_SCALES(k) ((k) / 32)
#endif
#else
#define ROW_SCALES(k) 0u
#endif

vec4 i8x4(uint w) {
    int s = int(w);
    return vec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8), bitfieldExtract(s, 24, 8));
}
// Small unsigned ints (< 2^23) to floats. NIBBLE_MAGIC: as the float bits of 2^23 + n minus 2^23
// (an OR and a subtract) instead of an int-to-float conversion, which runs at a fraction of the
// FP32 rate on some GPUs (NVIDIA's throughput tables); an A/B switch for bench/matvec_bench.py
// --ab NIBBLE_MAGIC, off until measured.
#ifdef NIBBLE_MAGIC
vec4 u2f4(uvec4 u) { return uintBitsToFloat(u | 0x4B000000u) - 8388608.0; }
float u2f(uint u) { return uintBitsToFloat(u | 0x4B000000u) - 8388608.0; }
#else
vec4 u2f4(uvec4 u) { return vec4(u); }
float u2f(uint u) { return float(u); }
#endif
// (byte >> sh) & mask for each byte of w (byte 0 first).
uvec4 bytebits(uint w, uint sh, uint mask) { return uvec4(w >> sh, w >> (sh + 8), w >> (sh + 16), w >> (sh + 24)) & mask; }
// Small fields read in place: the 4 fields (mask) of a word at bit offsets 0, 8 and 16 (the top
// one moved to 16) are each ORed into the mantissa of 2^23, then scaled down by their offset with
// the 2^23 subtracted (one FMA, exact): no int-to-float conversion and, per 4 nibbles, two shifts
// fewer than moving each field to bit 0. H100, Llama-3.1-8B Q4_K_M step 4430 -> 4283 µs (q6_k
// alone 4349), q6_k matvecs 4-9% faster; narrow units of 1024-wide rows (Qwen3-0.6B Q4_K_M) ran 4%
// slower with it, q4_1's 14336x4096 7% slower (bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kquant-pos/),
// hence only q6_k and the wide K-quant units use it. NIB_OLD / Q6_OLD: the previous decode (A/B;
// CPUs keep NIB_OLD, KernelCaps.kq_inplace: lavapipe's q4_k matvec ran ~5% slower in place).
const vec4 POS_S = vec4(1.0, 1.0 / 256.0, 1.0 / 65536.0, 1.0 / 65536.0);
const vec4 POS_O = vec4(8388608.0, 32768.0, 128.0, 128.0);
vec4 pos4(uint w, uint mask) {
    const uvec4 m = uvec4(w, w, w, w >> 8) & uvec4(mask, mask << 8, mask << 16, mask << 16);
    return uintBitsToFloat(m | 0x4B000000u) * POS_S - POS_O;
}
#if defined(KWIDE) && !defined(NIB_OLD)
vec4 lo4(uint w) { return pos4(w, 0xFu); }
vec4 hi4(uint w) { return pos4(w >> 4, 0xFu); }
#else
vec4 lo4(uint w) { return u2f4(bytebits(w, 0u, 0xFu)); }
vec4 hi4(uint w) { return u2f4(bytebits(w, 4u, 0xFu)); }
#endif
// Fifth bits of elements b..b+3 of a q5_0 block, already scaled to 16.
vec4 q5hi(uint qh, uint b) { return vec4(uvec4(qh >> b, qh >> (b + 1), qh >> (b + 2), qh >> (b + 3)) & 1u) * 16.0; }
#if defined(DT_IQ4_NL) || defined(DT_MXFP4)
// The 16 levels of a table-indexed nibble as int8 bytes of 4 words (NL_W0: levels 0-3, ...),
// picked by selects and a byte extract: a dynamically indexed const array goes through local memory
// (lavapipe, matvec_bench --preset dtypes: 2-4x slower than this, on a noisy shared CPU).
#undef NL_W0
#undef NL_W1
#undef NL_W2
#undef NL_W3
#ifdef DT_IQ4_NL
// iq4_nl: -127, -104, ..., 89, 113
#define NL_W0 0xBFAD9881u
#define NL_W1 0xF6EADDCFu
#define NL_W2 0x26190D01u
#define NL_W3 0x71594535u
#else
// mxfp4: e2m1 doubled (quant/mxfp4.py KVALUES): 0, 1, 2, 3, 4, 6, 8, 12, then the same negated
#define NL_W0 0x03020100u
#define NL_W1 0x0C080604u
#define NL_W2 0xFDFEFF00u
#define NL_W3 0xF4F8FAFCu
#endif
float NL16(uint n) {
    const uint w = (n & 8u) != 0u ? ((n & 4u) != 0u ? NL_W3 : NL_W2) : ((n & 4u) != 0u ? NL_W1 : NL_W0);
    return float(bitfieldExtract(int(w), int(8u * (n & 3u)), 8));
}
vec4 nl4lo(uint w) { return vec4(NL16(w & 0xFu), NL16((w >> 8) & 0xFu), NL16((w >> 16) & 0xFu), NL16((w >> 24) & 0xFu)); }
vec4 nl4hi(uint w) { return nl4lo(w >> 4); }
#endif
#if defined(QUANT) && !defined(KQUANT)
// Scale d (x) and min m (y; q4_1 / q5_1) of 32-element block b of the row whose scales start at rs.
vec2 block_dm(uint rs, uint b) {
#ifdef DT_MXFP4
    // 2^(e - 128) as the f32 whose exponent field is e - 1: exact for e >= 2, 0 for e <= 1
    // (quant/mxfp4.py E_KERNEL: other blocks reach the device only with all-zero levels)
    const uint e = (w_s[rs + b / 4] >> (8 * (b % 4))) & 0xFFu;
    return vec2(uintBitsToFloat((max(e, 1u) - 1u) << 23), 0.0);
#else
    return unpackHalf2x16(w_s[rs + b]);
#endif
}
#endif
#ifdef DT_Q3_K
// Signed 6-bit scale of sub-block i from a superblock's s words (the 12 packed bytes, then d): low 4
// bits in nibble i / 8 of byte i % 8, high 2 bits at bit 2 (i / 4) of byte 8 + i % 4; stored + 32.
int k3_scale(uvec4 sw, uint i) {
    const uint lo = (((i & 4u) != 0u ? sw.y : sw.x) >> (8u * (i & 3u) + 4u * (i >> 3))) & 0xFu;
    const uint hi = (sw.z >> (8u * (i & 3u) + 2u * (i >> 2))) & 3u;
    return int(lo | (hi << 4)) - 32;
}
#endif
#ifdef DT_Q6_K
// The 6-bit quants n of a q6_k unit, the low nibble of each byte of q under the 2 bits at the bottom
// of each byte of h: assembled in place and read as pos4 reads nibbles, v = n and
// dot(n - 32, x) = dot(v, x) - 32 sum(x). Q6_OLD: v = 1 + n/64, n shifted into the top mantissa
// bits of 1.0 one byte at a time (4349 vs 4430 µs a step, above), 64 (dot(v, x) - 1.5 sum(x)).
#ifndef Q6_OLD
#define Q6_SCL 1.0
#define Q6_OFF 32.0
vec4 q6v(uint q, uint h) { return pos4((q & 0x0F0F0F0Fu) | ((h << 4) & 0x30303030u), 0x3Fu); }
#else
#define Q6_SCL 64.0
#define Q6_OFF 1.5
vec4 q6v(uint q, uint h) {
    return uintBitsToFloat((uvec4(q << 17, q << 9, q << 1, q >> 7) & 0x001E0000u)
                           | (uvec4(h << 21, h << 13, h << 5, h >> 3) & 0x00600000u) | 0x3F800000u);
}
#endif
// d * (s0 * a0 + s1 * a1) for half n of superblock b, whose int8 scales are byte g of its s words
// 2n (low nibbles' sub-block) and 2n + 1 (high), a0 / a1 the sums of (v - Q6_OFF) x of each
float q6_scaled(uint rs, uint b, uint n, uint g, float a0, float a1) {
    const uint sb = rs + 5 * b + 2 * n;
    const float d = unpackHalf2x16(w_s[rs + 5 * b + 4]).x;
    const float s0 = float(bitfieldExtract(int(w_s[sb]), int(8 * g), 8));
    const float s1 = float(bitfieldExtract(int(w_s[sb + 1]), int(8 * g), 8));
    return Q6_SCL * d * (s0 * a0 + s1 * a1);
}
#endif
#if defined(DT_Q4_K) || defined(DT_Q5_K)
// Scales (x) and mins (y) of sub-blocks 2c (low byte) and 2c+1 (next byte), 6 bits each, from a
// superblock's s words (d|dmin, then the 12 packed bytes): sub-block j < 4 keeps its 6 bits in
// byte j (scale) / 4+j (min); j >= 4 has 4 low bits in byte 4+j and 2 high bits atop byte j-4 / j.
uvec2 k4_scale_min(uvec4 sw, uint c) {
    const uint sh = 16u * (c & 1u);
    const uint a = sw.y >> sh, b = sw.z >> sh, e = sw.w >> sh;
    // a select, not a branch: c differs between the 8-lane groups of one subgroup
    return c < 2u ? uvec2(a & 0x3F3Fu, b & 0x3F3Fu)
                  : uvec2((e & 0x0F0Fu) | ((a >> 2) & 0x3030u), ((e >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u));
}
// dm.x (sc0 a0 + sc1 a1) - dm.y (m0 xs0 + m1 xs1): the dots a0 / a1 of sub-blocks 2c / 2c+1 scaled
// (scm = k4_scale_min), their x sums xs0 / xs1 times the mins subtracted
float k4_scaled(vec2 dm, uvec2 scm, float a0, float a1, float xs0, float xs1) {
    return dm.x * (u2f(scm.x & 0xFFu) * a0 + u2f(scm.x >> 8) * a1)
         - dm.y * (u2f(scm.y & 0xFFu) * xs0 + u2f(scm.y >> 8) * xs1);
}
#endif

#if defined(QUANT) || (defined(DT_F16) && defined(WVEC))
#define XN_VEC4 2
#else
#define XN_VEC4 1
#endif
#ifdef KWIDE
#define XU_VEC4 8
#define load_x_n load_x8
#define unit_dot_n unit_dot8
#else
#define XU_VEC4 XN_VEC4
#define load_x_n load_x
#define unit_dot_n unit_dot
#endif

#if defined(KQUANT)
// The vec4 of x that the low nibbles / planes of narrow K-quant unit n multiply; the high ones'
// is KQ_XHI vec4s further on.
#if defined(DT_Q6_K)
#define KQ_XHI 16
// ql word w of half h: elements 128h+4w.. and 128h+64+4w..
uint kq_xv(uint n) { return 64 * (n / 32) + 32 * ((n % 32) / 16) + n % 16; }
#else
#define KQ_XHI 8
// q4_k/q5_k: qs word w of chunk c, elements 64c+4w.. and 64c+32+4w..; q2_k/q3_k: qs word w of
// half h holds 4 two-bit planes j (elements 128h+32j+4w..), a unit planes 2p, 2p+1: the same vec4s
uint kq_xv(uint n) { return 64 * (n / 32) + 16 * ((n % 32) / 8) + n % 8; }
#endif
#endif

#ifdef X4
// The activations unit u multiplies, loaded once and reused for every row a thread handles.
// Scalar units fill only the leading components.
void load_x_n(uint u, out vec4 xv[XN_VEC4]) {
#if defined(KQUANT)
    xv[0] = X4(kq_xv(u));
    xv[1] = X4(kq_xv(u) + KQ_XHI);
#elif defined(QUANT) && !defined(DT_Q8_0)
    uint b = u / 4, k = u % 4;   // nibble word k of block b: elements 4k.. and 16+4k..
    xv[0] = X4(8 * b + k);
    xv[1] = X4(8 * b + 4 + k);
#elif defined(QUANT) || defined(WVEC)
    for (uint j = 0; j < XN_VEC4; j++) xv[j] = X4(XN_VEC4 * u + j);
#elif defined(DT_F16)
    xv[0] = vec4(X1(2 * u), X1(2 * u + 1), 0.0, 0.0);
#else
    xv[0] = vec4(X1(u), 0.0, 0.0, 0.0);
#endif
}
#endif

// Dot product of unit u of the row whose words start at rw (scales at rs) with its activations.
float unit_dot_n(uint rw, uint rs, uint u, vec4 xv[XN_VEC4]) {
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
#elif defined(KQUANT)
    // The x sums are the same for every row, so the compiler keeps one copy per unit.
    const float xs0 = (xv[0].x + xv[0].y) + (xv[0].z + xv[0].w);
    const float xs1 = (xv[1].x + xv[1].y) + (xv[1].z + xv[1].w);
    const uint b = u / 32;
#if defined(DT_Q2_K) || defined(DT_Q3_K)
    const uint h = (u % 32) / 16, p = (u % 16) / 8, w = u % 8;
#if defined(DT_Q2_K)
    const uint q = w_u[rw + 16 * b + 8 * h + w];
    const uint sw = w_s[rs + 5 * b + 2 * h + p];   // bytes: sub-blocks 8h+4p.. (scale | min << 4)
    const vec2 dm = unpackHalf2x16(w_s[rs + 5 * b + 4]);
    const uint s0 = (sw >> (8 * (w / 4))) & 0xFFu, s1 = (sw >> (8 * (2 + w / 4))) & 0xFFu;
    const float a0 = dot(u2f4(bytebits(q, 4 * p, 3u)), xv[0]);
    const float a1 = dot(u2f4(bytebits(q, 4 * p + 2, 3u)), xv[1]);
    return dm.x * (u2f(s0 & 0xFu) * a0 + u2f(s1 & 0xFu) * a1) - dm.y * (u2f(s0 >> 4) * xs0 + u2f(s1 >> 4) * xs1);
#else
    const uint q = w_u[rw + 24 * b + 8 + 8 * h + w];
    const uint hm = w_u[rw + 24 * b + w];          // hmask bytes 4w..: bit k is element 32k + l's
    const uvec4 sw = w_s4[rs / 4 + b];
    const uint k = 4 * h + 2 * p, i = 8 * h + 4 * p + w / 4;
    const float a0 = dot(u2f4(bytebits(q, 4 * p, 3u) | (bytebits(hm, k, 1u) << 2)), xv[0]) - 4.0 * xs0;
    const float a1 = dot(u2f4(bytebits(q, 4 * p + 2, 3u) | (bytebits(hm, k + 1, 1u) << 2)), xv[1]) - 4.0 * xs1;
    return unpackHalf2x16(sw.w).x * (float(k3_scale(sw, i)) * a0 + float(k3_scale(sw, i + 2)) * a1);
#endif
#elif defined(DT_Q6_K)
    const uint n = (u % 32) / 16, w = u % 16;
    const uint q = w_u[rw + 48 * b + u % 32];
    const uint qh = w_u[rw + 48 * b + 32 + 8 * n + w % 8];
    const uint sh = w < 8u ? 0u : 2u;          // ql bytes 32.. pair with qh bits 2-3 / 6-7
    const float a0 = dot(q6v(q, qh >> sh), xv[0]) - Q6_OFF * xs0;
    const float a1 = dot(q6v(q >> 4, qh >> (sh + 4)), xv[1]) - Q6_OFF * xs1;
    return q6_scaled(rs, b, n, w / 4, a0, a1);
#else
    const uint c = (u % 32) / 8;
    const uvec4 sw = w_s4[rs / 4 + b];
    const vec2 dm = unpackHalf2x16(sw.x);
    const uvec2 scm = k4_scale_min(sw, c);
#if defined(DT_Q5_K)
    const uint q = w_u[rw + 40 * b + u % 32];
    const uint qh = w_u[rw + 40 * b + 32 + u % 8];
    const float a0 = dot(u2f4(bytebits(q, 0u, 0xFu) | (bytebits(qh, 2 * c, 1u) << 4)), xv[0]);
    const float a1 = dot(u2f4(bytebits(q, 4u, 0xFu) | (bytebits(qh, 2 * c + 1, 1u) << 4)), xv[1]);
#else
    const uint q = w_u[rw + u];
    const float a0 = dot(lo4(q), xv[0]), a1 = dot(hi4(q), xv[1]);
#endif
    return k4_scaled(dm, scm, a0, a1, xs0, xs1);
#endif
#else
    vec2 dm = block_dm(rs, u / 4);
#if defined(DT_Q8_0)
    uvec2 q = w_u2[rw / 2 + u];
    return dm.x * (dot(i8x4(q.x), xv[0]) + dot(i8x4(q.y), xv[1]));
#else
#if defined(DT_Q5_0) || defined(DT_Q5_1)
    uint b = u / 4, k = u % 4;
    uint q = w_u[rw + 5 * b + k];
    uint qh = w_u[rw + 5 * b + 4];
    float s = dot(lo4(q) + q5hi(qh, 4 * k), xv[0]) + dot(hi4(q) + q5hi(qh, 16 + 4 * k), xv[1]);
#elif defined(DT_IQ4_NL) || defined(DT_MXFP4)
    uint q = w_u[rw + u];
    float s = dot(nl4lo(q), xv[0]) + dot(nl4hi(q), xv[1]);
#else
    uint q = w_u[rw + u];
    float s = dot(lo4(q), xv[0]) + dot(hi4(q), xv[1]);
#endif
#if defined(DT_IQ4_NL) || defined(DT_MXFP4)
    return dm.x * s;
#else
    // The x sum is the same for every row, so the compiler keeps one copy per unit.
    vec4 x2 = xv[0] + xv[1];
    float xs = (x2.x + x2.y) + (x2.z + x2.w);
#if defined(DT_Q4_0)
    return dm.x * (s - 8.0 * xs);
#elif defined(DT_Q4_1) || defined(DT_Q5_1)
    return dm.x * s + dm.y * xs;
#else
    return dm.x * (s - 16.0 * xs);
#endif
#endif
#endif
#endif
}

#if defined(KWIDE)
// A 32-element K-quant unit: the 8-element units 4u..4u+3, whose weights are 4 adjacent words of one
// q4_k chunk / q6_k half sharing their scales, decoded once per unit instead of once per word (H100,
// Llama-3.1-8B shapes: the scale decode was ~25% of a q4_k matvec's time). The x layout is that of
// the four narrow units: xv[2i], xv[2i + 1] multiply narrow unit 4u + i.
#ifdef X4
void load_x(uint u, out vec4 xv[XU_VEC4]) {
    for (uint i = 0; i < 4; i++) {
        vec4 t[2];
        load_x8(4 * u + i, t);
        xv[2 * i] = t[0];
        xv[2 * i + 1] = t[1];
    }
}
#endif

#if defined(DT_Q4_K) || defined(DT_Q6_K)
// A wide q4_k / q6_k unit in three steps, so a caller can hold every row's weight words while only
// half of the unit's x is live (kwide_rows.glsl). kw_load: the unit's q words and its aux words
// (q4_k: the superblock's scale words; q6_k: the qh words, shifted to this unit's bits).
void kw_load(uint rw, uint rs, uint u, out uvec4 q, out uvec4 aux) {
    const uint b = u / 8;
#if defined(DT_Q4_K)
    q = w_u4[rw / 4 + u];   // rw: whole superblocks of 32 words
    aux = w_s4[rs / 4 + b];
#else
    const uint n = (u % 8) / 4, g = u % 4;     // ql words 4g.. of half n, their qh words 4(g % 2)..
    q = w_u4[(rw + 48 * b + 16 * n + 4 * g) / 4];   // rw: whole superblocks of 48 words
    aux = w_u4[(rw + 48 * b + 32 + 8 * n + 4 * (g % 2)) / 4] >> (g < 2u ? 0u : 2u);
#endif
}
// sum of the quants of half h (0: low nibbles, 1: high) times their 16 activations x
float kw_half(uvec4 q, uvec4 aux, uint h, vec4 x[4]) {
#if defined(DT_Q4_K)
    // (lo4 / hi4 by h, not one shifted decode: the high nibble is read in place, without a shift)
    if (h == 0u) return (dot(lo4(q.x), x[0]) + dot(lo4(q.y), x[1])) + (dot(lo4(q.z), x[2]) + dot(lo4(q.w), x[3]));
    return (dot(hi4(q.x), x[0]) + dot(hi4(q.y), x[1])) + (dot(hi4(q.z), x[2]) + dot(hi4(q.w), x[3]));
#else
    const uint sh = 4 * h;
    return (dot(q6v(q.x >> sh, aux.x >> sh), x[0]) + dot(q6v(q.y >> sh, aux.y >> sh), x[1]))
         + (dot(q6v(q.z >> sh, aux.z >> sh), x[2]) + dot(q6v(q.w >> sh, aux.w >> sh), x[3]));
#endif
}
// The unit's dot from its halves' sums a0 / a1 and the sums xs0 / xs1 of their activations.
float kw_scaled(uint rs, uvec4 aux, uint u, float a0, float a1, float xs0, float xs1) {
#if defined(DT_Q4_K)
    return k4_scaled(unpackHalf2x16(aux.x), k4_scale_min(aux, (u % 8) / 2), a0, a1, xs0, xs1);
#else
    return q6_scaled(rs, u / 8, (u % 8) / 4, u % 4, a0 - Q6_OFF * xs0, a1 - Q6_OFF * xs1);
#endif
}
#include "kw_planes.glsl"
float kw_xsum(vec4 x[4]) { return kw_xsum16(x); }
#undef KW_IDOT    // per inclusion: a fused q/k/v's slots may differ in dtype (fused_wslot.glsl)
#if defined(KQ_IDOT) && defined(X4) && !defined(KW_JOINT) && (defined(DT_Q4_K) || defined(KQ_IDOT_Q6))
// KQ_IDOT (KernelCaps.kq_idot): split q4_k units' dot products on integer dot products, and q6_k
// units' with KQ_IDOT_Q6 too (kernels.kq_idot, wvec_defines). Each half's 16 activations
// become block fixed point once per unit (kw_planes: xi = round(x 2^s), s from their largest
// |x|), shared by every row the loop holds; a row then takes KQ_PLANES 4x8-bit dot products per
// q word (one per byte plane of xi) instead of four nibble decodes and four FMAs. The integer sums
// are exact; the result differs from the float kernel by the rounding of x to 16 (two planes) or
// 22 bits (three) of its half's largest |x|.
#define KW_IDOT 1
#ifndef KW_IDOT_FNS
#define KW_IDOT_FNS
#extension GL_EXT_spirv_intrinsics : require
// OpUDot / OpSUDot (a signed, b unsigned), packed 4x8: the plain dot products, whose accumulation
// the compiler folds into the instruction (the saturating forms need a clamp the hardware lacks)
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4451)
uint udot4(uint a, uint b, spirv_literal int fmt);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int sudot4(uint a, uint b, spirv_literal int fmt);
#endif
// kw_half over planes: sum of the quants of half h times xi, exactly, times 2^-s. Three planes:
// |sum| < 16 * 63 * 2^21 < 2^31 (the partial sums wrap and come back); two: < 16 * 63 * 2^15.
float kw_half(uvec4 q, uvec4 aux, uint h, uvec4 p[KQ_PLANES], float inv) {
    uint s0 = 0u;
    int s1 = 0;
#if KQ_PLANES == 3
    uint s1u = 0u;
#endif
    for (uint i = 0; i < 4; i++) {
#if defined(DT_Q4_K)
        const uint n = (q[i] >> (4u * h)) & 0x0F0F0F0Fu;
#else
        const uint n = ((q[i] >> (4u * h)) & 0x0F0F0F0Fu) | (((aux[i] >> (4u * h)) << 4) & 0x30303030u);
#endif
        s0 += udot4(n, p[0][i], 0);
#if KQ_PLANES == 3
        s1u += udot4(n, p[1][i], 0);
        s1 += sudot4(p[2][i], n, 0);
#else
        s1 += sudot4(p[1][i], n, 0);
#endif
    }
#if KQ_PLANES == 3
    return float(int(s0 + (s1u << 8)) + (s1 << 16)) * inv;
#else
    return float(int(s0) + (s1 << 8)) * inv;
#endif
}
#endif
#ifdef X4
// the 16 activations of half h of wide unit u
void kw_x(uint u, uint h, out vec4 x[4]) {
    for (uint i = 0; i < 4; i++) x[i] = X4(kq_xv(4 * u + i) + h * KQ_XHI);
}
// KW_SPLIT: matvec loops take these units through kwide_rows.glsl. KW_JOINT (A/B): load_x +
// unit_dot, the whole unit's x live at once (56 vs 52 registers, H100, and ~10% slower there).
#ifndef KW_JOINT
#define KW_SPLIT 1
#endif
#endif
#endif

float unit_dot(uint rw, uint rs, uint u, vec4 xv[XU_VEC4]) {
#if defined(DT_Q4_K) || defined(DT_Q6_K)
    uvec4 q, aux;
    kw_load(rw, rs, u, q, aux);
    const vec4 x0[4] = vec4[4](xv[0], xv[2], xv[4], xv[6]), x1[4] = vec4[4](xv[1], xv[3], xv[5], xv[7]);
    return kw_scaled(rs, aux, u, kw_half(q, aux, 0u, x0), kw_half(q, aux, 1u, x1), kw_xsum(x0), kw_xsum(x1));
#else
    float s = 0.0;
    for (uint i = 0; i < 4; i++) s += unit_dot8(rw, rs, 4 * u + i, vec4[2](xv[2 * i], xv[2 * i + 1]));
    return s;
#endif
}
#endif

// Element i of the row whose words start at rw (scales at rs); used where a row is read once.
float dequant_elem(uint rw, uint rs, uint i) {
#if defined(DT_F32)
    return w_f[rw + i];
#elif defined(DT_F16)
    vec2 h = unpackHalf2x16(w_u[rw + i / 2]);
    return (i & 1u) == 0u ? h.x : h.y;
#elif defined(DT_Q2_K) || defined(DT_Q3_K)
    const uint b = i / 256, e = i % 256, h = e / 128, j = (e % 128) / 32, l = e % 32, sub = e / 16;
#if defined(DT_Q2_K)
    const uint q = (w_u[rw + 16 * b + 8 * h + l / 4] >> (8 * (l % 4) + 2 * j)) & 3u;
    const uint sb = (w_s[rs + 5 * b + sub / 4] >> (8 * (sub % 4))) & 0xFFu;
    const vec2 dm = unpackHalf2x16(w_s[rs + 5 * b + 4]);
    return dm.x * float(sb & 0xFu) * float(q) - dm.y * float(sb >> 4);
#else
    const uint q = (w_u[rw + 24 * b + 8 + 8 * h + l / 4] >> (8 * (l % 4) + 2 * j)) & 3u;
    const uint hb = (w_u[rw + 24 * b + l / 4] >> (8 * (l % 4) + e / 32)) & 1u;
    const uvec4 sw = w_s4[rs / 4 + b];
    return unpackHalf2x16(sw.w).x * float(k3_scale(sw, sub)) * (float(q | (hb << 2)) - 4.0);
#endif
#elif defined(DT_Q6_K)
    const uint b = i / 256, e = i % 256, n = e / 128, r = e % 128, l = r % 64, hi = r / 64;
    const uint q = (w_u[rw + 48 * b + 16 * n + l / 4] >> (8 * (l % 4) + 4 * hi)) & 0xFu;
    const uint h = (w_u[rw + 48 * b + 32 + 8 * n + (l % 32) / 4] >> (8 * (l % 4) + 2 * (l / 32) + 4 * hi)) & 3u;
    const uint sc = 8 * n + r / 16;
    const float d = unpackHalf2x16(w_s[rs + 5 * b + 4]).x;
    return d * float(bitfieldExtract(int(w_s[rs + 5 * b + sc / 4]), int(8 * (sc % 4)), 8)) * (float(q | (h << 4)) - 32.0);
#elif defined(KQUANT)
    const uint b = i / 256, e = i % 256, c = e / 64, hi = (e % 64) / 32, l = e % 32;
    const uvec4 sw = w_s4[rs / 4 + b];
    const vec2 dm = unpackHalf2x16(sw.x);
    const uvec2 scm = k4_scale_min(sw, c) >> (8 * hi);
#if defined(DT_Q5_K)
    uint q = (w_u[rw + 40 * b + 8 * c + l / 4] >> (8 * (l % 4) + 4 * hi)) & 0xFu;
    q |= ((w_u[rw + 40 * b + 32 + l / 4] >> (8 * (l % 4) + 2 * c + hi)) & 1u) << 4;
#else
    const uint q = (w_u[rw + 32 * b + 8 * c + l / 4] >> (8 * (l % 4) + 4 * hi)) & 0xFu;
#endif
    return dm.x * float(scm.x & 0xFFu) * float(q) - dm.y * float(scm.y & 0xFFu);
#else
    uint b = i / 32, e = i % 32;
    vec2 dm = block_dm(rs, b);
#if defined(DT_Q8_0)
    return dm.x * float(bitfieldExtract(int(w_u[rw + 8 * b + e / 4]), int(8 * (e % 4)), 8));
#else
    uint j = e % 16;
    uint n = (w_u[rw + BLOCK_WORDS * b + j / 4] >> (8 * (j % 4) + 4 * (e / 16))) & 0xFu;
#if defined(DT_Q4_0)
    return dm.x * (float(n) - 8.0);
#elif defined(DT_Q4_1)
    return dm.x * float(n) + dm.y;
#elif defined(DT_IQ4_NL) || defined(DT_MXFP4)
    return dm.x * NL16(n);
#else
    n |= ((w_u[rw + 5 * b + 4] >> e) & 1u) << 4;
#if defined(DT_Q5_1)
    return dm.x * float(n) + dm.y;
#else
    return dm.x * (float(n) - 16.0);
#endif
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
    vec2 dm = block_dm(rs, u / 4);
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
#elif defined(DT_MXFP4)
    w[0] = dm.x * nl4lo(q);
    w[1] = dm.x * nl4hi(q);
#else
#error "unit_weights: no unit decode for this dtype (kernels_rows.UNIT_DTYPES lists the ones with one)"
#endif
#endif
#endif
#endif
}
#endif

#version 450
#extension GL_GOOGLE_include_directive : require
// matmul over a wide prompt chunk (GPUs, 17+ rows): Y[t, row0 + m] = W[m, :] . X[t, :], W of any
// weight dtype (define DT_*) decoded by dequant.glsl in the tile loader (unit_weights a unit at a
// time with UNITS, dequant_elem an element at a time otherwise). Register-blocked: a workgroup of
// 256 invocations (16 x 16) owns a BM x BN output tile (BM = 16 TM weight rows, BN = 16 TN chunk
// rows); per BK-wide k step it stages the decoded weight tile and the activation tile in shared
// memory and each invocation accumulates a TM x TN micro-tile from TM/4 + TN/4 vec4 shared loads
// per k (matmul_rows.comp: 128 invocations, 3 loads per 32 FMAs; 8 x 8 here: 4 per 64).
// An invocation's rows are 4-wide vec4 columns 64 apart (tm*4 + 64i), so the 16 invocations of a
// half-warp read 16 consecutive vec4s and the other half-warp reads the same ones (broadcast).
// SPLITK: workgroup z sums only k tiles z, z+S, ... and writes its partial sums to P[z][t][m];
// matmul_rows_splitk.comp adds the S partials into Y (more workgroups when the tile grid alone
// would leave a GPU's SMs idle).
// Bindings: f32/f16: 0 W, 1 X, 2 Y (or P); quant: 0 q words, 1 scales, 2 X, 3 Y (or P).
// Spec: 0 wg size (256), 1 K, 2 M (rows bound), 3 T, 4 MTOT (Y row stride), 5 S (k splits).
// Defines: TM, TN (micro-tile, 4 or 8 each), PAD (0 or 1), QUADS (K % 4 == 0 off the unit path:
// dequant_quad.glsl, 4 elements a decode). Push: row0 (first output row of a row-split weight).
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_X 1
#else
#define B_S 1
#define B_X 2
#endif
#define B_Y (B_X + 1)
#ifdef UNITS
#define UNIT_WEIGHTS 1
#endif
#include "dequant.glsl"
#ifdef QUADS
#include "dequant_quad.glsl"
#endif
#ifndef ROW_SCALES
#define ROW_SCALES(k) ((k) / 32)    // scale words per row of the 32-element block dtypes
#endif

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint M = 1;
layout(constant_id = 3) const uint T = 1;
layout(constant_id = 4) const uint MTOT = 1;
layout(constant_id = 5) const uint S = 1;
layout(push_constant) uniform Push { uint row0; } pc;
layout(binding = B_X) readonly buffer XB { float x[]; };
layout(binding = B_X) readonly buffer XB4 { vec4 x4[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };

const uint BK = 32;        // a whole quant block: a q4/q5 unit spans its block's two halves
const uint BM = 16 * TM, BN = 16 * TN;
// k rows of the tiles in vec4s, padded by PAD (one) vec4 so that the tile stores spread over the
// banks; matmul_rows.py sets PAD 0 where the padded tiles exceed the shared memory (8 x 8 in 32 KiB)
const uint WS_STRIDE = BM / 4 + PAD, XS_STRIDE = BN / 4 + PAD;
shared vec4 ws[BK * WS_STRIDE];
shared vec4 xs[BK * XS_STRIDE];
#define WS_PUT(kk, r, v) ws[(kk) * WS_STRIDE + (r) / 4][(r) % 4] = (v)
#define XS_PUT(kk, c, v) xs[(kk) * XS_STRIDE + (c) / 4][(c) % 4] = (v)

void main() {
    const uint WG = 256;
    const uint tid = gl_LocalInvocationID.x;
    const uint m0 = gl_WorkGroupID.x * BM, n0 = gl_WorkGroupID.y * BN, z = gl_WorkGroupID.z;
    const uint tm = tid % 16, tn = tid / 16;
    float acc[TM * TN];
    for (uint i = 0; i < TM * TN; i++) acc[i] = 0.0;

#ifdef UNITS
    // Register-staged loads: the next k tile's weights (decoded) and activations are fetched into
    // registers before the current tile's FMAs, so their memory latency hides behind them; after
    // the FMAs they are stored into the (then free) shared tiles. Adjacent invocations take
    // adjacent units of a weight row and adjacent vec4s of a chunk row: contiguous reads.
    const uint UPR = BK / UNIT_ELEMS;
    const uint NWU = BM * UPR / WG, NXU = BN * (BK / 4) / WG;   // units / x vec4s per invocation
    vec4 wr[NWU * XU_VEC4], xr[NXU];
    uint k0 = z * BK;
#define FETCH(k0)                                                                       \
    for (uint i = 0; i < NWU; i++) {                                                    \
        const uint e = tid + i * WG, r = e / UPR, u = (k0) / UNIT_ELEMS + e % UPR;      \
        const uint m = min(m0 + r, M - 1);   /* rows past M decode the last row; never stored */ \
        vec4 w[XU_VEC4];                                                                \
        unit_weights(m * ROW_WORDS(K), m * ROW_SCALES(K), u, w);                        \
        for (uint j = 0; j < XU_VEC4; j++) wr[i * XU_VEC4 + j] = w[j];                  \
    }                                                                                   \
    for (uint i = 0; i < NXU; i++) {                                                    \
        const uint e = tid + i * WG, c = e / (BK / 4), n = n0 + c;                      \
        xr[i] = n < T ? x4[n * (K / 4) + (k0) / 4 + e % (BK / 4)] : vec4(0.0);          \
    }
    if (k0 < K) { FETCH(k0) }
    for (; k0 < K; k0 += S * BK) {
        for (uint i = 0; i < NWU; i++) {
            const uint e = tid + i * WG, r = e / UPR, u = k0 / UNIT_ELEMS + e % UPR;
            for (uint j = 0; j < XU_VEC4; j++) {
                const uint kk = 4 * unit_vec4(u, j) - k0;
                for (uint c = 0; c < 4; c++) WS_PUT(kk + c, r, wr[i * XU_VEC4 + j][c]);
            }
        }
        for (uint i = 0; i < NXU; i++) {
            const uint e = tid + i * WG, c = e / (BK / 4), kv = e % (BK / 4);
            for (uint q = 0; q < 4; q++) XS_PUT(4 * kv + q, c, xr[i][q]);
        }
        barrier();
        const uint k1 = k0 + S * BK;
        if (k1 < K) { FETCH(k1) }
#elif defined(QUADS)
    for (uint k0 = z * BK; k0 < K; k0 += S * BK) {
        // K % 4 == 0: four consecutive elements per decode (dequant_quad.glsl) and per x load;
        // adjacent invocations take adjacent quads of a row: contiguous reads
        for (uint e = tid; e < BM * (BK / 4); e += WG) {
            const uint r = e / (BK / 4), kk = 4 * (e % (BK / 4)), m = m0 + r, k = k0 + kk;
            const vec4 w = (m < M && k < K) ? dequant_quad(m * ROW_WORDS(K), m * ROW_SCALES(K), k) : vec4(0.0);
            for (uint c = 0; c < 4; c++) WS_PUT(kk + c, r, w[c]);
        }
        for (uint e = tid; e < BN * (BK / 4); e += WG) {
            const uint c = e / (BK / 4), kk = 4 * (e % (BK / 4)), n = n0 + c, k = k0 + kk;
            const vec4 v = (n < T && k < K) ? x4[(n * K + k) / 4] : vec4(0.0);
            for (uint q = 0; q < 4; q++) XS_PUT(kk + q, c, v[q]);
        }
        barrier();
#else
    for (uint k0 = z * BK; k0 < K; k0 += S * BK) {
        // adjacent invocations take adjacent k: contiguous weight and activation reads
        for (uint e = tid; e < BM * BK; e += WG) {
            uint r = e / BK, kk = e % BK;
            uint m = m0 + r, k = k0 + kk;
            WS_PUT(kk, r, (m < M && k < K) ? dequant_elem(m * ROW_WORDS(K), m * ROW_SCALES(K), k) : 0.0);
        }
        for (uint e = tid; e < BN * BK; e += WG) {
            uint c = e / BK, kk = e % BK;
            uint n = n0 + c, k = k0 + kk;
            XS_PUT(kk, c, (n < T && k < K) ? x[n * K + k] : 0.0);
        }
        barrier();
#endif
        for (uint kk = 0; kk < BK; kk++) {
            vec4 a[TM / 4], b[TN / 4];
            for (uint i = 0; i < TM / 4; i++) a[i] = ws[kk * WS_STRIDE + tm + 16 * i];
            for (uint j = 0; j < TN / 4; j++) b[j] = xs[kk * XS_STRIDE + tn + 16 * j];
            for (uint i = 0; i < TM; i++)
                for (uint j = 0; j < TN; j++) acc[i * TN + j] += a[i / 4][i % 4] * b[j / 4][j % 4];
        }
        barrier();
    }
    for (uint j = 0; j < TN; j++) {
        uint n = n0 + 64 * (j / 4) + 4 * tn + j % 4;
        if (n >= T) continue;
        for (uint i = 0; i < TM; i++) {
            uint m = m0 + 64 * (i / 4) + 4 * tm + i % 4;
            if (m >= M) continue;
#ifdef SPLITK
            y[(z * T + n) * M + m] = acc[i * TN + j];
#else
            y[n * MTOT + pc.row0 + m] = acc[i * TN + j];
#endif
        }
    }
}

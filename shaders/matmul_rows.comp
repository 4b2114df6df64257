#version 450
#extension GL_GOOGLE_include_directive : require
// matmul over a prompt chunk: Y[t, row0 + m] = W[m, :] . X[t, :] for T rows of X, W of any weight
// dtype (define DT_*), decoded by dequant.glsl: unit_weights a unit at a time with UNITS defined
// (K % 32 == 0 and, for f32/f16, WVEC), dequant_elem an element at a time otherwise. Tiled: a
// workgroup owns BM weight rows x BN chunk rows; per BK-wide slice of K it decodes its weight tile
// once into shared memory and uses every weight for all BN rows (the point of batching the prompt:
// each weight is read once per tile of tokens, not once per token). Each invocation keeps a
// TM x TN block of outputs (adjacent weight rows, adjacent chunk rows).
// Bindings: f32/f16: 0 W, 1 X, 2 Y; quant: 0 q words, 1 scales, 2 X, 3 Y.
// Spec: 0 wg size (= BM/TM * BN/TN = 2 * BN), 1 K, 2 M (rows bound), 3 T, 4 MTOT (Y row stride), 5 BN.
// Push: row0 (first output row of a row-split weight).
// MOE (moe_group.comp's tiles): W is 3-D (experts, M, K); workgroup y is tile y of the groups at
// binding B_G: its count chunk rows are the slots order[first ..] of one expert, x row slot / XDIV,
// y row slot (stride M). Spec 6 XDIV, 7 GROUP_ORDER. GLU_SILU (with MOE): Y = silu(G) * the
// product, G (the gate matmul's output, Y's layout) at binding B_G + 1 (moe_rows.glsl MOE_OUT).
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
#ifndef ROW_SCALES
#define ROW_SCALES(k) ((k) / 32)    // scale words per row of the 32-element block dtypes
#endif

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint M = 1;
layout(constant_id = 3) const uint T = 1;
layout(constant_id = 4) const uint MTOT = 1;
layout(constant_id = 5) const uint BN = 16;
layout(push_constant) uniform Push { uint row0; } pc;
layout(binding = B_X) readonly buffer XB { float x[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };
#include "moe_rows.glsl"

#ifdef UNITS
const uint BK = 32;        // a whole quant block: a q4/q5 unit spans its block's two halves
#else
const uint BK = 16;
#endif
// 8 x 4 outputs per invocation: on lavapipe 1.2-1.7x faster than 4 x 4 (and than 8 x 8, 16 x 4,
// 4 x 8) for a [1536, 576] q4_1 weight over 16 rows; fewer shared loads per FMA on GPUs too
const uint BM = 64, TM = 8, TN = 4;
const uint MSTRIDE = BM / TM;          // invocations along the weight rows
// Tiles in vec4s: an invocation's 8 weight rows and 4 chunk rows are adjacent, read as 2 + 1 vec4
// loads per k (lavapipe: 1.4-1.6x faster than 12 scalar loads); each k row is padded by one vec4
// so that the tile stores of adjacent invocations spread over the banks.
const uint WS_STRIDE = BM / 4 + 1, XS_STRIDE = BN / 4 + 1;
shared vec4 ws[BK * WS_STRIDE];
shared vec4 xs[BK * XS_STRIDE];
#define WS_PUT(kk, r, v) ws[(kk) * WS_STRIDE + (r) / 4][(r) % 4] = (v)
#define XS_PUT(kk, c, v) xs[(kk) * XS_STRIDE + (c) / 4][(c) % 4] = (v)

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint tid = gl_LocalInvocationID.x;
    const uint m0 = gl_WorkGroupID.x * BM, n0 = TILE_N0(BN);
    if (!moe_tile(gl_WorkGroupID.y)) return;    // MOE: a tile past the expert groups' count
    const uint tm = tid % MSTRIDE, tn = tid / MSTRIDE;
    float acc[TM * TN];
    for (uint i = 0; i < TM * TN; i++) acc[i] = 0.0;

    for (uint k0 = 0; k0 < K; k0 += BK) {
#ifdef UNITS
        // a unit (4 or 8 weights, dequant.glsl) per invocation step, decoded once; adjacent
        // invocations take adjacent units of a row: contiguous weight reads
        const uint UPR = BK / UNIT_ELEMS;
        for (uint e = tid; e < BM * UPR; e += WG) {
            uint r = e / UPR, u = k0 / UNIT_ELEMS + e % UPR;
            uint m = min(m0 + r, M - 1);    // rows past M decode the last row; never stored
            vec4 w[XU_VEC4];
            unit_weights(WROW(m) * ROW_WORDS(K), WROW(m) * ROW_SCALES(K), u, w);
            for (uint j = 0; j < XU_VEC4; j++) {
                uint kk = 4 * unit_vec4(u, j) - k0;
                for (uint c = 0; c < 4; c++) WS_PUT(kk + c, r, w[j][c]);
            }
        }
#else
        // adjacent invocations take adjacent k: contiguous weight and activation reads
        for (uint e = tid; e < BM * BK; e += WG) {
            uint r = e / BK, kk = e % BK;
            uint m = m0 + r, k = k0 + kk;
            WS_PUT(kk, r, (m < M && k < K) ? dequant_elem(WROW(m) * ROW_WORDS(K), WROW(m) * ROW_SCALES(K), k) : 0.0);
        }
#endif
        for (uint e = tid; e < BN * BK; e += WG) {
            uint c = e / BK, kk = e % BK;
            uint n = n0 + c, k = k0 + kk;
            XS_PUT(kk, c, (n < TILE_ROWS && k < K) ? x[XROW(n) * K + k] : 0.0);
        }
        barrier();
        for (uint kk = 0; kk < BK; kk++) {
            vec4 a0 = ws[kk * WS_STRIDE + 2 * tm], a1 = ws[kk * WS_STRIDE + 2 * tm + 1];
            vec4 b = xs[kk * XS_STRIDE + tn];
            for (uint j = 0; j < TN; j++) {
                for (uint i = 0; i < 4; i++) acc[i * TN + j] += a0[i] * b[j];
                for (uint i = 0; i < 4; i++) acc[(4 + i) * TN + j] += a1[i] * b[j];
            }
        }
        barrier();
    }
    for (uint j = 0; j < TN; j++) {
        uint n = n0 + tn * TN + j;
        if (n >= TILE_ROWS) continue;
        for (uint i = 0; i < TM; i++) {
            uint m = m0 + tm * TM + i;
            if (m >= M) continue;
            const uint at = YROW(n) * MTOT + pc.row0 + m;
            y[at] = MOE_OUT(at, acc[i * TN + j]);
        }
    }
}

#version 450
#extension GL_GOOGLE_include_directive : require
// matmul over a narrow prompt chunk (T <= 16 rows) on GPUs: Y[t, row0 + m] = W[m, :] . X[t, :].
// The tiled matmul_rows.comp gives such a chunk ceil(M/64) workgroups of 2*BN (8-32) invocations,
// each walking all of K serially with two barriers per k tile: a few dozen busy lanes on a GPU of
// a hundred SMs. Here, like the decode matvec, a workgroup of WG invocations owns RW weight rows
// (RW * BN <= WG outputs), WG / RW invocations per row splitting its K: each decodes its units
// once (dequant.glsl, as the matvec does) and uses them for all T chunk rows, then the partial sums
// of each output are added through shared memory. Every weight read once per chunk.
// Bindings: f32/f16: 0 W, 1 X, 2 Y; quant: 0 q words, 1 scales, 2 X, 3 Y.
// Spec: 0 wg size (RW x invocations per row, >= RW BN), 1 K, 2 M (rows bound), 3 T, 4 MTOT (Y row stride), 5 BN (>= T), 6 RW.
// Push: row0 (first output row of a row-split weight).
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
#define ROW_SCALES(k) ((k) / 32)
#endif

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint M = 1;
layout(constant_id = 3) const uint T = 1;
layout(constant_id = 4) const uint MTOT = 1;
layout(constant_id = 5) const uint BN = 16;
layout(constant_id = 6) const uint RW = 4;
layout(push_constant) uniform Push { uint row0; } pc;
layout(binding = B_X) readonly buffer XB { float x[]; };
layout(binding = B_X) readonly buffer XB4 { vec4 x4[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };

const uint NOUT = RW * BN;
const uint LPR = gl_WorkGroupSize.x / RW;       // invocations per weight row
// LPR partial sums per output, padded by one so that the summing invocations (one per output,
// reading along their row) hit different banks
shared float part[NOUT * (LPR + 1)];

void main() {
    const uint tid = gl_LocalInvocationID.x;
    // LPR adjacent invocations per weight row, each walking every LPR-th unit (or element) of it:
    // every invocation busy even where K holds fewer units than the workgroup has invocations (the
    // earlier form split K over all WG invocations for all RW rows at once, so SmolLM2's 576-wide
    // rows, 18 units, kept 46 of 64 idle and each held RW x BN sums)
    const uint r = tid / LPR, l = tid % LPR, m0 = gl_WorkGroupID.x * RW;
    const uint m = min(m0 + r, M - 1);    // rows past M decode the last row; never stored
    float acc[BN];
    for (uint t = 0; t < BN; t++) acc[t] = 0.0;

#ifdef UNITS
    for (uint u = l; u < K / UNIT_ELEMS; u += LPR) {
        vec4 w[XU_VEC4];
        unit_weights(m * ROW_WORDS(K), m * ROW_SCALES(K), u, w);
        for (uint j = 0; j < XU_VEC4; j++) {
            const uint kv = unit_vec4(u, j);
            for (uint t = 0; t < T; t++) acc[t] += dot(w[j], x4[t * (K / 4) + kv]);
        }
    }
#else
    for (uint k = l; k < K; k += LPR) {
        const float w = dequant_elem(m * ROW_WORDS(K), m * ROW_SCALES(K), k);
        for (uint t = 0; t < T; t++) acc[t] += w * x[t * K + k];
    }
#endif
    for (uint t = 0; t < T; t++) part[(r * BN + t) * (LPR + 1) + l] = acc[t];
    barrier();
    // NOUT <= WG: invocation o < NOUT sums output o (weight row o / BN, chunk row o % BN)
    const uint ro = tid / BN, t = tid % BN, mo = m0 + ro;
    if (tid < NOUT && t < T && mo < M) {
        float s = 0.0;
        for (uint i = 0; i < LPR; i++) s += part[tid * (LPR + 1) + i];
        y[t * MTOT + pc.row0 + mo] = s;
    }
}

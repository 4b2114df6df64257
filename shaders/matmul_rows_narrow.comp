#version 450
#extension GL_GOOGLE_include_directive : require
// matmul over a narrow prompt chunk (T <= 16 rows) on GPUs: Y[t, row0 + m] = W[m, :] . X[t, :].
// The tiled matmul_rows.comp gives such a chunk ceil(M/64) workgroups of 2*BN (8-32) invocations,
// each walking all of K serially with two barriers per k tile: a few dozen busy lanes on a GPU of
// a hundred SMs. Here, like the decode matvec, a workgroup of WG (64) invocations owns RW weight
// rows (RW * BN = 64 outputs) and splits K across its invocations: each decodes its units of the
// RW rows once (dequant.glsl, as the matvec does) and uses them for all T chunk rows, then the WG
// partial sums of each output are added through shared memory. M/RW workgroups (256-768 for a
// 0.6B model's 1024/3072-row weights), every weight read once per chunk.
// Bindings: f32/f16: 0 W, 1 X, 2 Y; quant: 0 q words, 1 scales, 2 X, 3 Y.
// Spec: 0 wg size (= RW * BN), 1 K, 2 M (rows bound), 3 T, 4 MTOT (Y row stride), 5 BN (>= T), 6 RW.
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
// one row of WG partial sums per output, padded by one so that the summing invocations (one per
// output, reading along their row) hit different banks
shared float part[NOUT * (gl_WorkGroupSize.x + 1)];

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint tid = gl_LocalInvocationID.x;
    const uint m0 = gl_WorkGroupID.x * RW;
    float acc[NOUT];
    for (uint i = 0; i < NOUT; i++) acc[i] = 0.0;

#ifdef UNITS
    // adjacent invocations take adjacent units of a row: contiguous weight and activation reads
    for (uint u = tid; u < K / UNIT_ELEMS; u += WG) {
        vec4 w[RW * XU_VEC4];
        for (uint r = 0; r < RW; r++) {
            uint m = min(m0 + r, M - 1);    // rows past M decode the last row; never stored
            vec4 wr[XU_VEC4];
            unit_weights(m * ROW_WORDS(K), m * ROW_SCALES(K), u, wr);
            for (uint j = 0; j < XU_VEC4; j++) w[r * XU_VEC4 + j] = wr[j];
        }
        for (uint j = 0; j < XU_VEC4; j++) {
            const uint kv = unit_vec4(u, j);
            for (uint t = 0; t < T; t++) {
                vec4 xv = x4[t * (K / 4) + kv];
                for (uint r = 0; r < RW; r++) acc[r * BN + t] += dot(w[r * XU_VEC4 + j], xv);
            }
        }
    }
#else
    for (uint k = tid; k < K; k += WG) {
        float w[RW];
        for (uint r = 0; r < RW; r++) {
            uint m = min(m0 + r, M - 1);
            w[r] = dequant_elem(m * ROW_WORDS(K), m * ROW_SCALES(K), k);
        }
        for (uint t = 0; t < T; t++) {
            float xv = x[t * K + k];
            for (uint r = 0; r < RW; r++) acc[r * BN + t] += w[r] * xv;
        }
    }
#endif
#ifdef USE_SUBGROUP
    // only the RW x T outputs that exist: a subgroup sum each, then gl_NumSubgroups partials per
    // output instead of WG (the shared-memory sum of 64 partials per output was most of the cost
    // of a small matmul: few K units per invocation)
    for (uint r = 0; r < RW; r++)
        for (uint t = 0; t < T; t++) {
            float v = subgroupAdd(acc[r * BN + t]);
            if (subgroupElect()) part[(r * BN + t) * (WG + 1) + gl_SubgroupID] = v;
        }
    const uint nparts = gl_NumSubgroups;
#else
    for (uint o = 0; o < NOUT; o++) part[o * (WG + 1) + tid] = acc[o];
    const uint nparts = WG;
#endif
    barrier();
    // WG == NOUT: invocation o sums output o (weight row o / BN, chunk row o % BN)
    const uint r = tid / BN, t = tid % BN, m = m0 + r;
    if (t < T && m < M) {
        float s = 0.0;
        for (uint i = 0; i < nparts; i++) s += part[tid * (WG + 1) + i];
        y[t * MTOT + pc.row0 + m] = s;
    }
}

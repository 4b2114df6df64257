#version 450
#extension GL_GOOGLE_include_directive : require
// The fused projection regions of a narrow prompt chunk / speculative verify step (T <= 16 rows,
// GPUs; vkdecode/kernels_rows_fused.py): matmul_rows_narrow.comp's workgroup (WG = RW * BN
// invocations owning RW weight rows x BN chunk rows of outputs, K split across the invocations,
// every weight unit decoded once for all T rows) with what decode's fused matvecs do around it:
//   NW = 1..4 projections of one input (q, k, v) in one dispatch: their row groups are
//     concatenated in the grid and a workgroup takes RW rows of one of them (uniform slot p);
//   NORM (RMS_NORM_MATMUL*_ROWS): x's chunk rows normalised on the fly. The dots run on the
//     weights scaled by norm_w, and each chunk row's sum of squares is gathered while x is loaded
//     (every element once per workgroup) and reduced with the dots:
//     y_t = rsqrt(mean(x_t^2) + eps) * (W diag(norm_w)) x_t;
//   GLU (*_SILU_MUL_ROWS; with GELU *_GELU_MUL_ROWS): slot 0 gate, slot 1 up (one dtype); a
//     workgroup takes RW / 2 rows of each, so y = act(g) * u is formed in the store;
//   ADD (MATMUL_(BIAS_)ADD_ROWS): y = r + W x, the residual r read in the store;
//   BIAS_p: + b_p[m] (weight row m, every chunk row) before the activation / the residual add.
// Bindings (numbers from kernels_rows_fused.py, as defines): B_X x, B_NW norm_w (NORM), per slot
// WB_p / SB_p (weight data or q words / scales), BB_p (bias, BIAS_p), YB_p (y_p; GLU: YB_0 only),
// B_R (residual, ADD). Spec: 0 wg size (= RW * BN), 1 K, 2 T, 3 BN (>= T), 4 RW, 5 EPS,
// 6..9 M_0..M_3 (rows of each weight; y_p is [T, M_p]).
#define NO_WG_REDUCE
#include "common.glsl"
#ifdef GELU
#include "gelu.glsl"
#endif

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint T = 1;
layout(constant_id = 3) const uint BN = 16;
layout(constant_id = 4) const uint RW = 4;
layout(constant_id = 5) const float EPS = 1e-6;
layout(constant_id = 6) const uint M_0 = 1;
layout(constant_id = 7) const uint M_1 = 0;
layout(constant_id = 8) const uint M_2 = 0;
layout(constant_id = 9) const uint M_3 = 0;

layout(binding = B_X) readonly buffer XB { float x[]; };
layout(binding = B_X) readonly buffer XB4 { vec4 x4[]; };
#ifdef NORM
layout(binding = B_NW) readonly buffer NB { float nw[]; };
layout(binding = B_NW) readonly buffer NB4 { vec4 nw4[]; };
#endif
#ifdef ADD
layout(binding = B_R) readonly buffer RB { float res[]; };
#endif

#ifdef UNITS
#define UNIT_WEIGHTS 1
#endif
#define FW_NO_FMV_ROWS 1
#define SLOT 0
#include "fused_wslot.glsl"
#include "narrow_wslot.glsl"
layout(binding = YB_0) writeonly buffer Y0 { float y_0[]; };
#ifdef BIAS_0
layout(binding = BB_0) readonly buffer Bi0 { float b_0[]; };
#endif
#if NW > 1
#undef SLOT
#define SLOT 1
#include "fused_wslot.glsl"
#include "narrow_wslot.glsl"
#ifndef GLU
layout(binding = YB_1) writeonly buffer Y1 { float y_1[]; };
#endif
#ifdef BIAS_1
layout(binding = BB_1) readonly buffer Bi1 { float b_1[]; };
#endif
#endif
#if NW > 2
#undef SLOT
#define SLOT 2
#include "fused_wslot.glsl"
#include "narrow_wslot.glsl"
layout(binding = YB_2) writeonly buffer Y2 { float y_2[]; };
#ifdef BIAS_2
layout(binding = BB_2) readonly buffer Bi2 { float b_2[]; };
#endif
#endif
#if NW > 3
#undef SLOT
#define SLOT 3
#include "fused_wslot.glsl"
#include "narrow_wslot.glsl"
layout(binding = YB_3) writeonly buffer Y3 { float y_3[]; };
#ifdef BIAS_3
layout(binding = BB_3) readonly buffer Bi3 { float b_3[]; };
#endif
#endif

// slot p's functions; p is uniform over the workgroup (GLU: rows of slots 0 and 1, one dtype)
#ifdef UNITS
void slot_unit(uint p, uint m, uint u, out vec4 w[XU_VEC4]) {
#if NW > 1
    if (p == 1u) { nw_unit_1(m, u, w); return; }
#endif
#if NW > 2
    if (p == 2u) { nw_unit_2(m, u, w); return; }
#endif
#if NW > 3
    if (p == 3u) { nw_unit_3(m, u, w); return; }
#endif
    nw_unit_0(m, u, w);
}
uint slot_vec4(uint p, uint u, uint j) {
#if NW > 1 && !defined(GLU)
    if (p == 1u) return nw_vec4_1(u, j);
#endif
#if NW > 2
    if (p == 2u) return nw_vec4_2(u, j);
#endif
#if NW > 3
    if (p == 3u) return nw_vec4_3(u, j);
#endif
    return nw_vec4_0(u, j);
}
#else
float slot_elem(uint p, uint m, uint k) {
#if NW > 1
    if (p == 1u) return nw_elem_1(m, k);
#endif
#if NW > 2
    if (p == 2u) return nw_elem_2(m, k);
#endif
#if NW > 3
    if (p == 3u) return nw_elem_3(m, k);
#endif
    return nw_elem_0(m, k);
}
#endif

float slot_bias(uint p, uint m) {
#ifdef BIAS_0
    if (p == 0u) return b_0[m];
#endif
#ifdef BIAS_1
    if (p == 1u) return b_1[m];
#endif
#ifdef BIAS_2
    if (p == 2u) return b_2[m];
#endif
#ifdef BIAS_3
    if (p == 3u) return b_3[m];
#endif
    return 0.0;
}

#ifndef GLU
void slot_store(uint p, uint i, float v) {
#if NW > 1
    if (p == 1u) { y_1[i] = v; return; }
#endif
#if NW > 2
    if (p == 2u) { y_2[i] = v; return; }
#endif
#if NW > 3
    if (p == 3u) { y_3[i] = v; return; }
#endif
    y_0[i] = v;
}
#endif

const uint NOUT = RW * BN;
#ifdef NORM
const uint NSS = BN;     // chunk rows' sums of squares, reduced after the NOUT dots
#else
const uint NSS = 0;
#endif
// one row of partial sums per output (and per sum of squares), padded by one so that the summing
// invocations (one per output, reading along their row) hit different banks
shared float part[(NOUT + NSS) * (gl_WorkGroupSize.x + 1)];

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint tid = gl_LocalInvocationID.x;
    uint g = flat_group_id();
    // this workgroup's slot p (rows of M_p) and first row m0; GLU: RW / 2 gate and up rows each
#ifdef GLU
    const uint HR = RW / 2;
    const uint p = 0, mp = M_0, m0 = g * HR;
    if (m0 >= M_0) return;      // padding of a 2-D grid: the whole workgroup leaves together
#else
    uint p = 0, mp = M_0, gp = (M_0 + RW - 1) / RW;
#if NW > 1
    if (g >= gp) { g -= gp; p = 1; mp = M_1; gp = (M_1 + RW - 1) / RW; }
#endif
#if NW > 2
    if (g >= gp) { g -= gp; p = 2; mp = M_2; gp = (M_2 + RW - 1) / RW; }
#endif
#if NW > 3
    if (g >= gp) { g -= gp; p = 3; mp = M_3; gp = (M_3 + RW - 1) / RW; }
#endif
    if (g >= gp) return;        // padding of a 2-D grid
    const uint m0 = g * RW;
#endif
    float acc[NOUT];
    for (uint i = 0; i < NOUT; i++) acc[i] = 0.0;
#ifdef NORM
    float ss[BN];
    for (uint t = 0; t < BN; t++) ss[t] = 0.0;
#endif

#ifdef GLU
    // output row r < HR: gate row m0 + r (slot 0); r >= HR: up row m0 + r - HR (slot 1)
#define ROW_SLOT(r) ((r) < HR ? 0u : 1u)
#define ROW_M(r) min(m0 + (r) % HR, mp - 1)     // rows past M decode the last row; never stored
#else
#define ROW_SLOT(r) p
#define ROW_M(r) min(m0 + (r), mp - 1)
#endif
#ifdef UNITS
    // adjacent invocations take adjacent units of a row: contiguous weight and activation reads
    for (uint u = tid; u < K / UNIT_ELEMS; u += WG) {
        vec4 w[RW * XU_VEC4];
        for (uint r = 0; r < RW; r++) {
            vec4 wr[XU_VEC4];
#ifdef GLU
            if (r < HR) nw_unit_0(ROW_M(r), u, wr);
            else nw_unit_1(ROW_M(r), u, wr);
#else
            slot_unit(p, ROW_M(r), u, wr);
#endif
            for (uint j = 0; j < XU_VEC4; j++) w[r * XU_VEC4 + j] = wr[j];
        }
        for (uint j = 0; j < XU_VEC4; j++) {
            const uint kv = slot_vec4(p, u, j);
#ifdef NORM
            // norm_w scales the RW weights (fewer multiplies than the T activations)
            const vec4 nv = nw4[kv];
            for (uint r = 0; r < RW; r++) w[r * XU_VEC4 + j] *= nv;
#endif
            for (uint t = 0; t < T; t++) {
                const vec4 xv = x4[t * (K / 4) + kv];
#ifdef NORM
                ss[t] += dot(xv, xv);
#endif
                for (uint r = 0; r < RW; r++) acc[r * BN + t] += dot(w[r * XU_VEC4 + j], xv);
            }
        }
    }
#else
    for (uint k = tid; k < K; k += WG) {
        float w[RW];
#ifdef NORM
        const float nv = nw[k];
#else
        const float nv = 1.0;
#endif
        for (uint r = 0; r < RW; r++) w[r] = slot_elem(ROW_SLOT(r), ROW_M(r), k) * nv;
        for (uint t = 0; t < T; t++) {
            const float xv = x[t * K + k];
#ifdef NORM
            ss[t] += xv * xv;
#endif
            for (uint r = 0; r < RW; r++) acc[r * BN + t] += w[r] * xv;
        }
    }
#endif

#ifdef USE_SUBGROUP
    // only the RW x T outputs that exist: a subgroup sum each, then gl_NumSubgroups partials
    for (uint r = 0; r < RW; r++)
        for (uint t = 0; t < T; t++) {
            float v = subgroupAdd(acc[r * BN + t]);
            if (subgroupElect()) part[(r * BN + t) * (WG + 1) + gl_SubgroupID] = v;
        }
#ifdef NORM
    for (uint t = 0; t < T; t++) {
        float v = subgroupAdd(ss[t]);
        if (subgroupElect()) part[(NOUT + t) * (WG + 1) + gl_SubgroupID] = v;
    }
#endif
    const uint nparts = gl_NumSubgroups;
#else
    for (uint o = 0; o < NOUT; o++) part[o * (WG + 1) + tid] = acc[o];
#ifdef NORM
    for (uint t = 0; t < BN; t++) part[(NOUT + t) * (WG + 1) + tid] = ss[t];
#endif
    const uint nparts = WG;
#endif
    barrier();
    // WG == NOUT: invocation o sums output o (workgroup row o / BN, chunk row o % BN)
    const uint r = tid / BN, t = tid % BN;
    if (t >= T) return;
    float inv = 1.0;
#ifdef NORM
    float sq = 0.0;     // every invocation of chunk row t sums the same partials in the same order
    for (uint i = 0; i < nparts; i++) sq += part[(NOUT + t) * (WG + 1) + i];
    inv = inversesqrt(sq / float(K) + EPS);
#endif
#ifdef GLU
    const uint m = m0 + r;
    if (r >= HR || m >= mp) return;
    float gs = 0.0, us = 0.0;
    for (uint i = 0; i < nparts; i++) {
        gs += part[tid * (WG + 1) + i];
        us += part[(tid + HR * BN) * (WG + 1) + i];
    }
    gs = gs * inv + slot_bias(0u, m);
    us = us * inv + slot_bias(1u, m);
#ifdef GELU
    y_0[t * mp + m] = gelu_tanh(gs) * us;
#else
    y_0[t * mp + m] = gs / (1.0 + exp(-gs)) * us;
#endif
#else
    const uint m = m0 + r;
    if (m >= mp) return;
    float s = 0.0;
    for (uint i = 0; i < nparts; i++) s += part[tid * (WG + 1) + i];
    s = s * inv + slot_bias(p, m);
#ifdef ADD
    s = res[t * mp + m] + s;
#endif
    slot_store(p, t * mp + m, s);
#endif
}

#version 450
#extension GL_GOOGLE_include_directive : require
// RMS_NORM_MATMUL: y_p = W_p (x / rms(x) * norm_w) [+ b_p] for NW projections p (q, k, v: 1..4)
// of one dtype in one dispatch. The row blocks of the projections are concatenated in the grid:
// workgroup g takes ROWS rows of the projection its index falls in, and normalises x itself.
// Bindings (numbers from fused_matvec.py, as defines): B_X x, B_NW norm_w, and per projection p:
// WB_p (data or q), SB_p (scales, quant dtypes), BB_p (bias, when BIAS_p), YB_p (y_p).
// Spec: 0 wg size, 1 K, 2 ROWS, 3 EPS, 4..7 M_0..M_3 (rows of each projection).
// B_H (a MoE router, lowering/moe.py): the normed x is written too, each workgroup a share of it
// (the experts read it; the router's logits are the one projection).
#define NO_WG_REDUCE
#include "common.glsl"
#define NORM 1
#include "fused_matvec.glsl"

layout(constant_id = 4) const uint M_0 = 1;
layout(constant_id = 5) const uint M_1 = 0;
layout(constant_id = 6) const uint M_2 = 0;
layout(constant_id = 7) const uint M_3 = 0;

#define SLOT 0
#include "fused_wslot.glsl"
layout(binding = YB_0) writeonly buffer Y0 { float y_0[]; };
#ifdef BIAS_0
layout(binding = BB_0) readonly buffer Bi0 { float b_0[]; };
#endif
#if NW > 1
#undef SLOT
#define SLOT 1
#include "fused_wslot.glsl"
layout(binding = YB_1) writeonly buffer Y1 { float y_1[]; };
#ifdef BIAS_1
layout(binding = BB_1) readonly buffer Bi1 { float b_1[]; };
#endif
#endif
#if NW > 2
#undef SLOT
#define SLOT 2
#include "fused_wslot.glsl"
layout(binding = YB_2) writeonly buffer Y2 { float y_2[]; };
#ifdef BIAS_2
layout(binding = BB_2) readonly buffer Bi2 { float b_2[]; };
#endif
#endif
#if NW > 3
#undef SLOT
#define SLOT 3
#include "fused_wslot.glsl"
layout(binding = YB_3) writeonly buffer Y3 { float y_3[]; };
#ifdef BIAS_3
layout(binding = BB_3) readonly buffer Bi3 { float b_3[]; };
#endif
#endif

#ifdef B_H
layout(binding = B_H) writeonly buffer HB { float h_out[]; };
#endif

void main() {
    const uint t = gl_LocalInvocationID.x;
    uint g = flat_group_id();
#ifdef B_H
    const uint g0 = g;
#endif
    // which projection this workgroup's rows belong to (uniform over the workgroup)
    uint p = 0, m = M_0, gp = (M_0 + ROWS - 1) / ROWS;
#if NW > 1
    if (g >= gp) { g -= gp; p = 1; m = M_1; gp = (M_1 + ROWS - 1) / ROWS; }
#endif
#if NW > 2
    if (p == 1 && g >= gp) { g -= gp; p = 2; m = M_2; gp = (M_2 + ROWS - 1) / ROWS; }
#endif
#if NW > 3
    if (p == 2 && g >= gp) { g -= gp; p = 3; m = M_3; gp = (M_3 + ROWS - 1) / ROWS; }
#endif
    if (g >= gp) return;  // padding of a 2-D grid: the whole workgroup leaves together
    const uint first = g * ROWS;

    fmv_clear();
    if (p == 0) fmv_rows_0(first, m, 0);
#if NW > 1
    else if (p == 1) fmv_rows_1(first, m, 0);
#endif
#if NW > 2
    else if (p == 2) fmv_rows_2(first, m, 0);
#endif
#if NW > 3
    else fmv_rows_3(first, m, 0);
#endif
    fmv_acc[ROWS] = fmv_ss_total();
    fmv_reduce();
#ifdef B_H
    const float inv = fmv_inv_rms(fmv_total(ROWS));
    // X1 is x * norm_w (or NORM_PRE's stored x * norm_w); its sum of squares is already taken.
    // Stride: the workgroups holding rows (a 2-D grid's padding ones left above).
    const uint n_groups = (M_0 + ROWS - 1) / ROWS + (M_1 + ROWS - 1) / ROWS + (M_2 + ROWS - 1) / ROWS
                          + (M_3 + ROWS - 1) / ROWS;
    for (uint i = g0 * gl_WorkGroupSize.x + t; i < K; i += n_groups * gl_WorkGroupSize.x) h_out[i] = X1(i) * inv;
#endif
    if (t >= ROWS || first + t >= m) return;
    const uint row = first + t;
    float v = fmv_total(t) * fmv_inv_rms(fmv_total(ROWS));
    if (p == 0) {
#ifdef BIAS_0
        v += b_0[row];
#endif
        y_0[row] = v;
    }
#if NW > 1
    else if (p == 1) {
#ifdef BIAS_1
        v += b_1[row];
#endif
        y_1[row] = v;
    }
#endif
#if NW > 2
    else if (p == 2) {
#ifdef BIAS_2
        v += b_2[row];
#endif
        y_2[row] = v;
    }
#endif
#if NW > 3
    else {
#ifdef BIAS_3
        v += b_3[row];
#endif
        y_3[row] = v;
    }
#endif
}

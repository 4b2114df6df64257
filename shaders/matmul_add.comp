#version 450
#extension GL_GOOGLE_include_directive : require
// MATMUL_ADD: y = r + W @ x (output / down projection accumulating into the residual stream), the
// add done in the matvec epilogue: one dispatch and no intermediate W @ x buffer.
// Bindings: f32/f16: 0 W data, 1 x, 2 r, 3 y; quant: 0 q words, 1 scales, 2 x, 3 r, 4 y.
// COMBINE_X (defines CX_H, CX_D, CX_S): x is split-K attention partials, combined on load.
// Spec and push as matmul.comp (matvec.glsl): 0 wg size, 1 K, 2 M, 3 ROWS; push row0.
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_X 1
#else
#define B_S 1
#define B_X 2
#endif
#define B_R (B_X + 1)
#define B_Y (B_X + 2)

layout(binding = B_X) readonly buffer X1B { float x1[]; };
layout(binding = B_X) readonly buffer X4B { vec4 x4[]; };
layout(binding = B_R) readonly buffer RB { float r[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };
#ifdef COMBINE_X
// x is split-K attention's partials (CX_S splits of CX_H heads of CX_D, attn_partials.glsl), and
// each element is combined over the splits as it is loaded: the o-projection does the combine, so
// the attention needs no combine dispatch and no barrier before one. The loads of a unit's splits
// and (m, l) pairs are independent, so this adds no round trip to the matvec's own.
#include "attn_partials.glsl"
#define CX_ML(s, h) PART_ML(s, h, CX_H, CX_D, CX_S)

// e^(m_s - M) / sum_s' e^(m_s' - M) l_s' for each split s of head h; 0 for an empty split.
void cx_weights(uint h, out float w[CX_S]) {
    float mx = NEG_INF;
    for (uint s = 0; s < CX_S; s++)
        if (x1[CX_ML(s, h) + 1] > 0.0) mx = max(mx, x1[CX_ML(s, h)]);
    float l = 0.0;
    for (uint s = 0; s < CX_S; s++) {
        const float ls = x1[CX_ML(s, h) + 1];
        w[s] = ls > 0.0 ? exp(x1[CX_ML(s, h)] - mx) : 0.0;
        l += w[s] * ls;
    }
    for (uint s = 0; s < CX_S; s++) w[s] /= l;
}
// The weights of the head last asked for: an invocation's unit (8 elements) lies in one head, so
// its second load reuses the first's weights instead of reloading the (m, l) pairs.
uint cx_head = 0xffffffffu;
float cx_w[CX_S];
void cx_head_weights(uint h) {
    if (h != cx_head) {
        cx_weights(h, cx_w);
        cx_head = h;
    }
}
float cx1(uint i) {
    cx_head_weights(i / CX_D);
    float a = 0.0;
    for (uint s = 0; s < CX_S; s++) a += cx_w[s] * x1[PART_O(s, 0u, i, CX_H, CX_D)];
    return a;
}
vec4 cx4(uint i) {  // CX_D % 4 == 0: the four elements share a head
    cx_head_weights(4u * i / CX_D);
    vec4 a = vec4(0.0);
    for (uint s = 0; s < CX_S; s++) a += cx_w[s] * x4[PART_O(s, 0u, 4u * i, CX_H, CX_D) / 4u];
    return a;
}
#define X1(i) cx1(i)
#define X4(i) cx4(i)
#else
#define X1(i) x1[i]
#define X4(i) x4[i]
#endif
#define MV_STORE(row, v) y[row] = r[row] + (v)

#include "dequant.glsl"
#include "matvec.glsl"

void main() { matvec_main(); }

#version 450
#extension GL_GOOGLE_include_directive : require
// RMS_NORM_MATMUL_MOE_TOPK: the FFN norm, the router matvec and the top-k of its softmax in one
// workgroup: h = x / rms(x) * norm_w (written: the experts read it), logits = W_router @ h kept in
// shared memory, then moe_select.glsl's softmax and top-k -> ids, weights. The router is small
// (experts x hidden), so one workgroup reads it; with subgroup arithmetic each subgroup takes whole
// experts (no workgroup barrier per expert).
// Bindings: 0 x, 1 norm_w, 2 W (quant: 2 q, 3 scales), then h, ids, weights; BIAS (gpt-oss,
// RMS_NORM_MATMUL_BIAS_MOE_TOPK): then the router's bias row, added to each logit before the top-k.
// Spec: 0 wg size, 1 K (hidden), 2 E, 3 TOPK, 4 EPS.
#include "common.glsl"

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint E = 8;
layout(constant_id = 3) const uint TOPK = 2;
layout(constant_id = 4) const float EPS = 1e-6;

#define B_W 2
#if defined(DT_F32) || defined(DT_F16)
#define B_H 3
#else
#define B_S 3
#define B_H 4
#endif
layout(binding = 0) readonly buffer X1B { float x1[]; };
layout(binding = 0) readonly buffer X4B { vec4 x4[]; };
layout(binding = 1) readonly buffer N1B { float n1[]; };
layout(binding = 1) readonly buffer N4B { vec4 n4[]; };
layout(binding = B_H) writeonly buffer HB { float h[]; };
layout(binding = B_H + 1) writeonly buffer IB { uint ids[]; };
layout(binding = B_H + 2) writeonly buffer WB { float weights[]; };
#ifdef BIAS
layout(binding = B_H + 3) readonly buffer BB { float router_b[]; };
#define LOGIT(e, acc) ((acc) + router_b[e])
#else
#define LOGIT(e, acc) (acc)
#endif

float moe_inv = 1.0;  // 1 / rms(x)
// the normed activation, recomputed from x where the matvec loads it (h is not read back)
#define X1(i) (x1[i] * moe_inv * n1[i])
#define X4(i) (x4[i] * moe_inv * n4[i])

#include "dequant.glsl"
#include "moe_select.glsl"

float router_dot(uint e, uint u0, uint stride) {
    float acc = 0.0;
    for (uint u = u0; u < K / UNIT_ELEMS; u += stride) {
        vec4 xv[XU_VEC4];
        load_x(u, xv);
        acc += unit_dot(e * ROW_WORDS(K), e * ROW_SCALES(K), u, xv);
    }
    return acc;
}

void main() {
    const uint t = gl_LocalInvocationID.x;
    float ss = 0.0;
    for (uint i = t; i < K; i += gl_WorkGroupSize.x) ss += x1[i] * x1[i];
    moe_inv = inversesqrt(wg_sum(ss) / float(K) + EPS);
    for (uint i = t; i < K; i += gl_WorkGroupSize.x) h[i] = X1(i);
#ifdef USE_SUBGROUP
    for (uint e = gl_SubgroupID; e < E; e += gl_NumSubgroups) {
        const float acc = subgroupAdd(router_dot(e, gl_SubgroupInvocationID, gl_SubgroupSize));
        if (subgroupElect()) moe_p[e] = LOGIT(e, acc);
    }
#else
    for (uint e = 0; e < E; e++) {
        const float acc = wg_sum(router_dot(e, t, gl_WorkGroupSize.x));
        if (t == 0u) moe_p[e] = LOGIT(e, acc);
    }
#endif
    moe_softmax_pick();
    moe_store(0u);
}

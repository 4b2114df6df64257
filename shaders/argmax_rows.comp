#version 450
#extension GL_GOOGLE_include_directive : require
// argmax of each of T rows of N logits (the speculative verify step): workgroup t scans row t;
// the first index of the maximum, as argmax.comp. Bindings: 0 logits, 1 tokens[T].
// Spec: 0 wg size, 1 N.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(binding = 0) readonly buffer LB { float logits[]; };
layout(binding = 1) writeonly buffer TB { uint tokens[]; };

shared float bv[gl_WorkGroupSize.x];
shared uint bi[gl_WorkGroupSize.x];

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const uint row = gl_WorkGroupID.x;
    float best = NEG_INF;
    uint idx = 0xffffffffu;
    for (uint i = tid; i < N; i += WG) {
        float v = logits[row * N + i];
        if (v > best) { best = v; idx = i; }   // strided ascending: the first max of this lane
    }
    bv[tid] = best;
    bi[tid] = idx;
    barrier();
    for (uint h = WG / 2; h > 0; h >>= 1) {
        if (tid < h) {
            float v = bv[tid + h];
            uint j = bi[tid + h];
            if (v > bv[tid] || (v == bv[tid] && j < bi[tid])) { bv[tid] = v; bi[tid] = j; }
        }
        barrier();
    }
    if (tid == 0) tokens[row] = bi[0];
}

#version 450
#extension GL_GOOGLE_include_directive : require
// rms_norm: y = x / sqrt(mean(x^2) + eps) * w over each D-element slice of x; one workgroup
// per slice (D == len(x) normalises the whole vector, D == head_dim each head).
// Bindings: 0 x, 1 w[D], 2 y. Spec: 0 workgroup size, 1 D, 2 eps (float).
#include "common.glsl"

layout(constant_id = 1) const uint D = 1;
layout(constant_id = 2) const float EPS = 1e-6;
layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) writeonly buffer YB { float y[]; };

void main() {
    uint base = flat_group_id() * D;
    uint t = gl_LocalInvocationID.x;
    float ss = 0.0;
    for (uint i = t; i < D; i += gl_WorkGroupSize.x) ss += x[base + i] * x[base + i];
    float r = inversesqrt(wg_sum(ss) / float(D) + EPS);
    for (uint i = t; i < D; i += gl_WorkGroupSize.x) y[base + i] = x[base + i] * r * w[i];
}

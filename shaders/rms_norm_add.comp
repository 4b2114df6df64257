#version 450
#extension GL_GOOGLE_include_directive : require
// RMS_NORM_ADD: s = r + x / rms(x) * w (Gemma's post-attention / post-FFN norm and the residual
// add), one workgroup, one dispatch. Bindings: 0 x, 1 w[N], 2 r, 3 s. Spec: 0 wg size, 1 N, 2 eps.
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const float EPS = 1e-6;
layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) readonly buffer RB { float r[]; };
layout(binding = 3) writeonly buffer SB { float s[]; };

void main() {
    const uint t = gl_LocalInvocationID.x;
    float ss = 0.0;
    for (uint i = t; i < N; i += gl_WorkGroupSize.x) ss += x[i] * x[i];
    float inv = inversesqrt(wg_sum(ss) / float(N) + EPS);
    for (uint i = t; i < N; i += gl_WorkGroupSize.x) s[i] = r[i] + x[i] * inv * w[i];
}

#version 450
#extension GL_GOOGLE_include_directive : require
// ADD_RMS_NORM: s = a + b (the new residual) and y = s / rms(s) * w, one workgroup, one dispatch.
// Each invocation re-adds its own elements for y instead of reading s back (no extra barrier).
// ADD_RMS_NORM_ROWS (a batched decode step): workgroup r takes row r, elements r*N .. r*N + N - 1.
// Bindings: 0 a, 1 b, 2 w[N], 3 s, 4 y. Spec: 0 wg size, 1 N, 2 eps.
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const float EPS = 1e-6;
layout(binding = 0) readonly buffer AB { float a[]; };
layout(binding = 1) readonly buffer BB { float b[]; };
layout(binding = 2) readonly buffer WB { float w[]; };
layout(binding = 3) writeonly buffer SB { float s[]; };
layout(binding = 4) writeonly buffer YB { float y[]; };

void main() {
    const uint t = gl_LocalInvocationID.x, o = flat_group_id() * N;
    float ss = 0.0;
    for (uint i = t; i < N; i += gl_WorkGroupSize.x) {
        float v = a[o + i] + b[o + i];
        s[o + i] = v;
        ss += v * v;
    }
    float r = inversesqrt(wg_sum(ss) / float(N) + EPS);
    for (uint i = t; i < N; i += gl_WorkGroupSize.x) y[o + i] = (a[o + i] + b[o + i]) * r * w[i];
}

#version 450
#extension GL_GOOGLE_include_directive : require
// rms_norm: y = x / sqrt(mean(x^2) + eps) * w over each D-element slice of x; one workgroup
// per slice (D == len(x) normalises the whole vector, D == head_dim each head).
// Bindings: 0 x, 1 w[D], 2 y. Spec: 0 workgroup size, 1 D, 2 eps (float).
// XPLANES (lowering/xplanes.py): also y's planes as xplanes.comp writes them, binding 3, for the
// R (spec 3) rows of a batched step, each invocation taking whole groups of 16: no extra dispatch.
#include "common.glsl"

layout(constant_id = 1) const uint D = 1;
layout(constant_id = 2) const float EPS = 1e-6;
layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) writeonly buffer YB { float y[]; };
#ifdef XPLANES
#include "kw_planes.glsl"
layout(constant_id = 3) const uint R = 1;
layout(binding = 3) writeonly buffer PB { uvec4 p4[]; };
layout(binding = 3) writeonly buffer FB { vec2 pf[]; };
#endif

void main() {
    uint base = flat_group_id() * D;
    uint t = gl_LocalInvocationID.x;
    float ss = 0.0;
    for (uint i = t; i < D; i += gl_WorkGroupSize.x) ss += x[base + i] * x[base + i];
    float r = inversesqrt(wg_sum(ss) / float(D) + EPS);
#ifdef XPLANES
    const uint G = D / 16, row = flat_group_id();
    for (uint g = t; g < G; g += gl_WorkGroupSize.x) {
        vec4 v[4];
        for (uint j = 0; j < 16; j++) {
            const uint i = 16 * g + j;
            v[j / 4][j % 4] = x[base + i] * r * w[i];   // the bits of y below
            y[base + i] = v[j / 4][j % 4];
        }
        KW_PLANES_STORE(v, row, g, G, R, kw_xsum16_exact(v));
    }
#else
    for (uint i = t; i < D; i += gl_WorkGroupSize.x) y[base + i] = x[base + i] * r * w[i];
#endif
}

#version 450
#extension GL_GOOGLE_include_directive : require
// rms_norm: y = x / sqrt(mean(x^2) + eps) * w over each D-element slice of x; one workgroup
// per slice (D == len(x) normalises the whole vector, D == head_dim each head).
// Bindings: 0 x, 1 w[D], 2 y. Spec: 0 workgroup size, 1 D, 2 eps (float).
// XPLANES (lowering/xplanes.py): also y's planes as xplanes.comp writes them, binding 3, for the
// R (spec 3) rows of a batched step, each invocation taking whole groups of 16: no extra dispatch.
// A row's groups are split over PARTS (spec 4) workgroups (lowering/xplanes.norm_parts), each
// summing the whole row's squares itself: one workgroup a row left a 4-row step's norms to 4 SMs.
#include "common.glsl"

layout(constant_id = 1) const uint D = 1;
layout(constant_id = 2) const float EPS = 1e-6;
layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) writeonly buffer YB { float y[]; };
#ifdef XPLANES
#include "kw_planes.glsl"
layout(constant_id = 3) const uint R = 1;
layout(constant_id = 4) const uint PARTS = 1;
layout(binding = 0) readonly buffer X4B { vec4 x4[]; };
layout(binding = 1) readonly buffer W4B { vec4 w4[]; };
layout(binding = 2) writeonly buffer Y4B { vec4 y4[]; };
layout(binding = 3) writeonly buffer PB { uvec4 p4[]; };
layout(binding = 3) writeonly buffer FB { vec2 pf[]; };
#endif

void main() {
    uint t = gl_LocalInvocationID.x;
    float ss = 0.0;
#ifdef XPLANES
    // the plain kernel's sum, in its order (same bits)
    const uint row = flat_group_id() / PARTS, part = flat_group_id() % PARTS, base4 = row * (D / 4);
    for (uint i = t; i < D; i += gl_WorkGroupSize.x) ss += x[row * D + i] * x[row * D + i];
    float r = inversesqrt(wg_sum(ss) / float(D) + EPS);
    const uint G = D / 16, per = (G + PARTS - 1) / PARTS;
    for (uint g = part * per + t; g < min(G, (part + 1) * per); g += gl_WorkGroupSize.x) {
        vec4 v[4];
        for (uint j = 0; j < 4; j++) {
            v[j] = x4[base4 + 4 * g + j] * r * w4[4 * g + j];   // the bits of y below
            y4[base4 + 4 * g + j] = v[j];
        }
        KW_PLANES_STORE(v, row, g, G, R, kw_xsum16_exact(v));
    }
#else
    uint base = flat_group_id() * D;
    for (uint i = t; i < D; i += gl_WorkGroupSize.x) ss += x[base + i] * x[base + i];
    float r = inversesqrt(wg_sum(ss) / float(D) + EPS);
    for (uint i = t; i < D; i += gl_WorkGroupSize.x) y[base + i] = x[base + i] * r * w[i];
#endif
}

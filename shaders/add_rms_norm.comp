#version 450
#extension GL_GOOGLE_include_directive : require
// ADD_RMS_NORM: s = a + b (the new residual) and y = s / rms(s) * w, one workgroup, one dispatch.
// Each invocation re-adds its own elements for y instead of reading s back (no extra barrier).
// ADD_RMS_NORM_ROWS (a batched decode step): workgroup r takes row r, elements r*N .. r*N + N - 1.
// Bindings: 0 a, 1 b, 2 w[N], 3 s, 4 y. Spec: 0 wg size, 1 N, 2 eps.
// XPLANES (lowering/xplanes.py): also y's planes as xplanes.comp writes them, binding 5, for the
// R (spec 3) rows of a batched step, each row's groups over PARTS (spec 4) workgroups, as
// rms_norm.comp's XPLANES (each sums the whole row; s and y are written by the part holding them).
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const float EPS = 1e-6;
layout(binding = 0) readonly buffer AB { float a[]; };
layout(binding = 1) readonly buffer BB { float b[]; };
layout(binding = 2) readonly buffer WB { float w[]; };
layout(binding = 3) writeonly buffer SB { float s[]; };
layout(binding = 4) writeonly buffer YB { float y[]; };
#ifdef XPLANES
#include "kw_planes.glsl"
layout(constant_id = 3) const uint R = 1;
layout(constant_id = 4) const uint PARTS = 1;
layout(binding = 0) readonly buffer A4B { vec4 a4[]; };
layout(binding = 1) readonly buffer B4B { vec4 b4[]; };
layout(binding = 2) readonly buffer W4B { vec4 w4[]; };
layout(binding = 3) writeonly buffer S4B { vec4 s4[]; };
layout(binding = 4) writeonly buffer Y4B { vec4 y4[]; };
layout(binding = 5) writeonly buffer PB { uvec4 p4[]; };
layout(binding = 5) writeonly buffer FB { vec2 pf[]; };
#endif

void main() {
    const uint t = gl_LocalInvocationID.x;
#ifdef XPLANES
    const uint row = flat_group_id() / PARTS, part = flat_group_id() % PARTS, o = row * N;
#else
    const uint o = flat_group_id() * N;
#endif
    float ss = 0.0;
    for (uint i = t; i < N; i += gl_WorkGroupSize.x) {
        float v = a[o + i] + b[o + i];
#ifndef XPLANES
        s[o + i] = v;
#endif
        ss += v * v;
    }
    float r = inversesqrt(wg_sum(ss) / float(N) + EPS);
#ifdef XPLANES
    const uint G = N / 16, per = (G + PARTS - 1) / PARTS, o4 = o / 4;
    for (uint g = part * per + t; g < min(G, (part + 1) * per); g += gl_WorkGroupSize.x) {
        vec4 v[4];
        for (uint j = 0; j < 4; j++) {
            const uint i = 4 * g + j;
            const vec4 sv = a4[o4 + i] + b4[o4 + i];
            s4[o4 + i] = sv;
            v[j] = sv * r * w4[i];   // the bits of the plain kernel's y
            y4[o4 + i] = v[j];
        }
        KW_PLANES_STORE(v, row, g, G, R, kw_xsum16_exact(v));
    }
#else
    for (uint i = t; i < N; i += gl_WorkGroupSize.x) y[o + i] = (a[o + i] + b[o + i]) * r * w[i];
#endif
}

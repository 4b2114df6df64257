#version 450
#extension GL_GOOGLE_include_directive : require
// The S k-split partial sums of matmul_rows_wide.comp (SPLITK) into Y:
// Y[t, row0 + m] = sum over z of P[z][t][m], added in z order (a fixed order: the same sums every run).
// Bindings: 0 P, 1 Y. Spec: 0 wg size, 1 M (rows bound), 2 T, 3 MTOT (Y row stride), 4 S.
// Push: row0 (first output row of a row-split weight).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint M = 1;
layout(constant_id = 2) const uint T = 1;
layout(constant_id = 3) const uint MTOT = 1;
layout(constant_id = 4) const uint S = 1;
layout(push_constant) uniform Push { uint row0; } pc;
layout(binding = 0) readonly buffer PB { float p[]; };
layout(binding = 1) writeonly buffer YB { float y[]; };

void main() {
    uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= M * T) return;
    float s = 0.0;
    for (uint z = 0; z < S; z++) s += p[z * M * T + i];
    y[(i / M) * MTOT + pc.row0 + i % M] = s;
}

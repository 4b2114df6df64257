#version 450
#extension GL_GOOGLE_include_directive : require
// add over a prompt chunk with a bias: c[i] = a[i] + b[i % NB] (b one row, a T rows).
// Bindings: 0 a, 1 b, 2 c. Spec: 0 wg size, 1 N, 2 NB.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const uint NB = 1;
layout(binding = 0) readonly buffer AB { float a[]; };
layout(binding = 1) readonly buffer BB { float b[]; };
layout(binding = 2) writeonly buffer CB { float c[]; };

void main() {
    uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < N) c[i] = a[i] + b[i % NB];
}

#version 450
#extension GL_GOOGLE_include_directive : require
// moe_bias: slot s of x gets the bias row of the expert it ran, y[s*N_ROW + j] = x[..] +
// b[ids[s]*N_ROW + j] (gpt-oss's per-expert biases), one invocation per element.
// Bindings: 0 x, 1 b (experts x N_ROW), 2 ids, 3 y. Spec: 0 wg size, 1 N, 2 N_ROW.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const uint N_ROW = 1;
layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer BB { float b[]; };
layout(binding = 2) readonly buffer IB { uint ids[]; };
layout(binding = 3) writeonly buffer YB { float y[]; };

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < N) y[i] = x[i] + b[ids[i / N_ROW] * N_ROW + i % N_ROW];
}

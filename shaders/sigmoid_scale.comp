#version 450
#extension GL_GOOGLE_include_directive : require
// sigmoid_scale: out[i] = y[i] / (1 + exp(-g[i / N_ROW])), one invocation per element (Qwen2-MoE's
// shared expert scaled by its sigmoid gate). Bindings: 0 g, 1 y, 2 out. Spec: 0 wg size, 1 N, 2 N_ROW.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const uint N_ROW = 1;
layout(binding = 0) readonly buffer GB { float g[]; };
layout(binding = 1) readonly buffer YB { float y[]; };
layout(binding = 2) writeonly buffer OB { float o[]; };

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < N) o[i] = y[i] / (1.0 + exp(-g[i / N_ROW]));
}

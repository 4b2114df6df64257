#version 450
#extension GL_GOOGLE_include_directive : require
// gelu_mul: y = gelu_tanh(g) * u (GeGLU, PyTorch's gelu approximate="tanh"), one invocation per
// element. Bindings: 0 g, 1 u, 2 y. Spec: 0 wg size, 1 N.
#define NO_WG_REDUCE
#include "common.glsl"
#include "gelu.glsl"

layout(constant_id = 1) const uint N = 1;
layout(binding = 0) readonly buffer GB { float g[]; };
layout(binding = 1) readonly buffer UB { float u[]; };
layout(binding = 2) writeonly buffer YB { float y[]; };

void main() {
    uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < N) y[i] = gelu_tanh(g[i]) * u[i];
}

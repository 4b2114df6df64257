#version 450
#extension GL_GOOGLE_include_directive : require
// swiglu_clamp (gpt-oss's GLU): c = min(g, LIMIT); y = c * sigmoid(ALPHA * c) * (clamp(u, -LIMIT,
// LIMIT) + 1), one invocation per element. Bindings: 0 g, 1 u, 2 y. Spec: 0 wg size, 1 N,
// 2 ALPHA, 3 LIMIT.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const float ALPHA = 1.0;
layout(constant_id = 3) const float LIMIT = 1.0;
layout(binding = 0) readonly buffer GB { float g[]; };
layout(binding = 1) readonly buffer UB { float u[]; };
layout(binding = 2) writeonly buffer YB { float y[]; };

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < N) {
        const float c = min(g[i], LIMIT);
        y[i] = c / (1.0 + exp(-ALPHA * c)) * (clamp(u[i], -LIMIT, LIMIT) + 1.0);
    }
}

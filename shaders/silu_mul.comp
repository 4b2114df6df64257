#version 450
#extension GL_GOOGLE_include_directive : require
// silu_mul: y = g * sigmoid(g) * u, one invocation per element.
// Bindings: 0 g, 1 u, 2 y. Spec: 0 wg size, 1 N.
// XPLANES (lowering/xplanes.py): one invocation per group of 16 elements, also writing y's planes
// as xplanes.comp does, binding 3, for rows of DIM (spec 2): no extra dispatch.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(binding = 0) readonly buffer GB { float g[]; };
layout(binding = 1) readonly buffer UB { float u[]; };
layout(binding = 2) writeonly buffer YB { float y[]; };
#ifdef XPLANES
#include "kw_planes.glsl"
layout(constant_id = 2) const uint DIM = 16;
layout(binding = 3) writeonly buffer PB { uvec4 p4[]; };
layout(binding = 3) writeonly buffer FB { vec2 pf[]; };
layout(binding = 0) readonly buffer G4B { vec4 g4[]; };
layout(binding = 1) readonly buffer U4B { vec4 u4[]; };
layout(binding = 2) writeonly buffer Y4B { vec4 y4[]; };

void main() {
    const uint G = DIM / 16, n = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (n >= N / 16) return;
    vec4 x[4];
    for (uint j = 0; j < 4; j++) {
        const vec4 v = g4[4 * n + j];
        x[j] = v / (1.0 + exp(-v)) * u4[4 * n + j];   // the bits of the plain kernel's y
        y4[4 * n + j] = x[j];
    }
    KW_PLANES_STORE(x, n / G, n % G, G, N / DIM, kw_xsum16_exact(x));
}
#else
void main() {
    uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < N) {
        float v = g[i];
        y[i] = v / (1.0 + exp(-v)) * u[i];
    }
}
#endif

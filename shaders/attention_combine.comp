#version 450
#extension GL_GOOGLE_include_directive : require
// Combines attention's split-K partials: o = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
// One workgroup per head. Bindings: 0 partials [H][S][D + 2], 1 o. Spec: 0 wg size, 1 H, 2 D, 3 S.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint D = 1;
layout(constant_id = 3) const uint S = 1;
layout(binding = 0) readonly buffer PB { float p[]; };
layout(binding = 1) writeonly buffer OB { float o[]; };

void main() {
    const uint h = gl_WorkGroupID.x;
    const uint base = h * S * (D + 2);
    float mx = NEG_INF;
    for (uint s = 0; s < S; s++)
        if (p[base + s * (D + 2) + D + 1] > 0.0) mx = max(mx, p[base + s * (D + 2) + D]);
    float l = 0.0;
    for (uint s = 0; s < S; s++) {
        float ls = p[base + s * (D + 2) + D + 1];
        if (ls > 0.0) l += exp(p[base + s * (D + 2) + D] - mx) * ls;
    }
    for (uint j = gl_LocalInvocationID.x; j < D; j += gl_WorkGroupSize.x) {
        float acc = 0.0;
        for (uint s = 0; s < S; s++) {
            uint b = base + s * (D + 2);
            if (p[b + D + 1] > 0.0) acc += exp(p[b + D] - mx) * p[b + j];
        }
        o[h * D + j] = acc / l;
    }
}

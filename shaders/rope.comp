#version 450
#extension GL_GOOGLE_include_directive : require
// rope: rotate each pair (a, b) of every head by angle pos * freqs[i], pos from the step buffer,
// freqs the inverse-frequency table (vkdecode/models/rope.py). Layout NEOX (define) pairs element
// i with i + D/2, otherwise 2i with 2i+1.
// One invocation per pair. Bindings: 0 x, 1 step, 2 freqs[D/2], 3 y. Spec: 0 wg size, 1 H, 2 D.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint D = 2;
layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer StepB { uint step[]; };
layout(binding = 2) readonly buffer FreqB { float freqs[]; };
layout(binding = 3) writeonly buffer YB { float y[]; };

void main() {
    uint p = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    const uint half_d = D / 2;
    if (p >= H * half_d) return;
    uint h = p / half_d, i = p % half_d;
#ifdef NEOX
    uint ia = h * D + i, ib = ia + half_d;
#else
    uint ia = h * D + 2 * i, ib = ia + 1;
#endif
    float ang = float(step[STEP_POS]) * freqs[i];
    // Vulkan only bounds sin/cos error on [-pi, pi]; reduce first so large positions stay exact-ish.
    const float TWO_PI = 6.283185307179586;
    ang -= TWO_PI * floor(ang / TWO_PI + 0.5);
    float c = cos(ang), s = sin(ang);
    float a = x[ia], b = x[ib];
    y[ia] = a * c - b * s;
    y[ib] = a * s + b * c;
}

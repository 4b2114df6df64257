#version 450
#extension GL_GOOGLE_include_directive : require
// rope over a prompt chunk: row t of x (H heads of D) rotated at position step.pos + t, as
// rope.comp does for one row. One invocation per pair. Angle of pair i: pos * theta^(-2i/D), or
// with FREQS (an inverse-frequency table input) pos * freqs[i].
// Bindings: 0 x, 1 step, 2 y (FREQS: 2 freqs[D/2], 3 y). Spec: 0 wg size, 1 H, 2 D, 3 theta
// (float, unused with FREQS), 4 T. BATCH (fusion/chunk_batch.py): row t at the position of its own
// step record, step[t * STEP_WORDS + STEP_POS].
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint D = 2;
layout(constant_id = 3) const float THETA = 10000.0;
layout(constant_id = 4) const uint T = 1;
layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer StepB { uint step[]; };
#ifdef FREQS
layout(binding = 2) readonly buffer FreqB { float freqs[]; };
layout(binding = 3) writeonly buffer YB { float y[]; };
#else
layout(binding = 2) writeonly buffer YB { float y[]; };
#endif

void main() {
    uint p = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    const uint half_d = D / 2;
    if (p >= T * H * half_d) return;
    uint t = p / (H * half_d), q = p % (H * half_d);
    uint h = q / half_d, i = q % half_d;
#ifdef NEOX
    uint ia = (t * H + h) * D + i, ib = ia + half_d;
#else
    uint ia = (t * H + h) * D + 2 * i, ib = ia + 1;
#endif
#ifdef BATCH
    uint pos = step[t * STEP_WORDS + STEP_POS];
#else
    uint pos = step[STEP_POS] + t;
#endif
#ifdef FREQS
    float ang = float(pos) * freqs[i];
#else
    float ang = float(pos) * pow(THETA, -float(2 * i) / float(D));
#endif
    const float TWO_PI = 6.283185307179586;
    ang -= TWO_PI * floor(ang / TWO_PI + 0.5);
    float c = cos(ang), s = sin(ang);
    float a = x[ia], b = x[ib];
    y[ia] = a * c - b * s;
    y[ib] = a * s + b * c;
}

#version 450
#extension GL_GOOGLE_include_directive : require
// conv1d_step (fusion/ir.py): Qwen3.5's causal depthwise convolution of one new token, with SiLU.
// hist holds the last K - 1 inputs as rows by position % (K - 1); positions before 0 read as zero,
// so a sequence restarting at position 0 needs no clearing. One invocation per channel: it reads
// its channel's history before writing the new input over the oldest.
// Bindings: 0 x[C], 1 w[C K], 2 step, 3 y[C], 4 hist[(K - 1) C]. Spec: 0 wg size, 1 C, 2 K.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint C = 1;
layout(constant_id = 2) const uint K = 4;

layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };
layout(binding = 3) writeonly buffer YB { float y[]; };
layout(binding = 4) buffer HB { float hist[]; };

void main() {
    const uint c = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (c >= C) return;
    const uint pos = step[STEP_POS];
    const float xc = x[c];
    float acc = 0.0;
    for (uint j = 0; j + 1 < K; j++) {   // u at position pos - (K - 1 - j)
        const uint back = K - 1 - j;
        if (pos >= back) acc += w[c * K + j] * hist[((pos - back) % (K - 1)) * C + c];
    }
    acc += w[c * K + K - 1] * xc;
    hist[(pos % (K - 1)) * C + c] = xc;
    y[c] = acc / (1.0 + exp(-acc));
}

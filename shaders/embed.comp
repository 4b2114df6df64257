#version 450
#extension GL_GOOGLE_include_directive : require
// embed: y = table[step.token] * SCALE, table of any weight dtype (define DT_*); one invocation per element.
// A table beyond maxStorageBufferRange is bound in row ranges by several calls; each call
// writes y only when the token falls in its range [row0, row0 + ROWS_BOUND).
// Bindings: f32/f16: 0 data, 1 step, 2 y; quant: 0 q words, 1 scales, 2 step, 3 y.
// Spec: 0 workgroup size, 1 DIM, 2 ROWS_BOUND, 3 SCALE (Gemma's sqrt(dim); 1.0 otherwise). Push: row0.
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_STEP 1
#else
#define B_S 1
#define B_STEP 2
#endif
#define B_Y (B_STEP + 1)
#include "dequant.glsl"

layout(constant_id = 1) const uint DIM = 1;
layout(constant_id = 2) const uint ROWS_BOUND = 1;
layout(constant_id = 3) const float SCALE = 1.0;
layout(push_constant) uniform Push { uint row0; } pc;
layout(binding = B_STEP) readonly buffer StepB { uint step[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };

void main() {
    uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint r = step[STEP_TOKEN] - pc.row0;  // wraps to a huge value below row0
    if (i >= DIM || r >= ROWS_BOUND) return;
    y[i] = dequant_elem(r * ROW_WORDS(DIM), r * ROW_SCALES(DIM), i) * SCALE;
}

#version 450
#extension GL_GOOGLE_include_directive : require
// embed over a prompt chunk: y[t] = table[tokens[t]] * SCALE for T rows, table of any weight dtype
// (define DT_*); one invocation per element. A table bound in row ranges (beyond
// maxStorageBufferRange) is split over calls as in embed.comp: each writes the rows whose token
// falls in [row0, row0 + ROWS_BOUND).
// Bindings: f32/f16: 0 data, 1 tokens, 2 y; quant: 0 q words, 1 scales, 2 tokens, 3 y.
// BATCH (fusion/chunk_batch.py): tokens is the batch step buffer, row t's token at t * STEP_WORDS.
// Spec: 0 workgroup size, 1 DIM, 2 ROWS_BOUND, 3 T, 4 SCALE (attr scale, 1.0 unless set). Push: row0.
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_TOK 1
#else
#define B_S 1
#define B_TOK 2
#endif
#define B_Y (B_TOK + 1)
#include "dequant.glsl"
#ifndef ROW_SCALES
#define ROW_SCALES(k) ((k) / 32)    // scale words per row of the 32-element block dtypes
#endif

layout(constant_id = 1) const uint DIM = 1;
layout(constant_id = 2) const uint ROWS_BOUND = 1;
layout(constant_id = 3) const uint T = 1;
layout(constant_id = 4) const float SCALE = 1.0;
layout(push_constant) uniform Push { uint row0; } pc;
layout(binding = B_TOK) readonly buffer TokB { uint tokens[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };

void main() {
    uint g = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (g >= T * DIM) return;
    uint t = g / DIM, i = g % DIM;
#ifdef BATCH
    uint r = tokens[t * STEP_WORDS + STEP_TOKEN] - pc.row0;
#else
    uint r = tokens[t] - pc.row0;  // wraps to a huge value below row0
#endif
    if (r >= ROWS_BOUND) return;
    y[g] = dequant_elem(r * ROW_WORDS(DIM), r * ROW_SCALES(DIM), i) * SCALE;
}

#version 450
#extension GL_GOOGLE_include_directive : require
// The last dispatch of a batched decode step (fusion/chunk_batch.py), as advance_step.comp is of a
// single one: every live row (STEP_LIVE set) is fed the token it chose at its next position, so
// the recorded step runs again with no host write; padding rows stay as they are.
// Bindings: 0 next_token[T], 1 batch step buffer (read-write). Spec: 0 wg size, 1 T.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint T = 1;
layout(binding = 0) readonly buffer TB { uint next_token[]; };
layout(binding = 1) buffer SB { uint step_buf[]; };

void main() {
    uint t = gl_GlobalInvocationID.x;
    if (t >= T || step_buf[t * STEP_WORDS + STEP_LIVE] == 0u) return;
    step_buf[t * STEP_WORDS + STEP_TOKEN] = next_token[t];
    step_buf[t * STEP_WORDS + STEP_POS] += 1u;
}

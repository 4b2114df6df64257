#version 450
#extension GL_GOOGLE_include_directive : require
// The last dispatch of a batched decode step (fusion/chunk_batch.py), as advance_step.comp is of a
// single one: every live row (STEP_LIVE set) is fed the token it chose at its next position, so
// the recorded step runs again with no host write; padding rows stay as they are. Each live row's
// token also goes to ring[(pos % 2) * T + row] (pos: the position the step ran), so the host can
// read a step's tokens after the next step was submitted (executors/batch_ahead.py).
// Bindings: 0 next_token[T], 1 batch step buffer (read-write), 2 ring[2 T]. Spec: 0 wg size, 1 T.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint T = 1;
layout(binding = 0) readonly buffer TB { uint next_token[]; };
layout(binding = 1) buffer SB { uint step_buf[]; };
layout(binding = 2) writeonly buffer RB { uint ring[]; };

void main() {
    uint t = gl_GlobalInvocationID.x;
    if (t >= T || step_buf[t * STEP_WORDS + STEP_LIVE] == 0u) return;
    const uint pos = step_buf[t * STEP_WORDS + STEP_POS];
    ring[(pos & 1u) * T + t] = next_token[t];
    step_buf[t * STEP_WORDS + STEP_TOKEN] = next_token[t];
    step_buf[t * STEP_WORDS + STEP_POS] = pos + 1u;
}

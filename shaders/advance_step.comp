#version 450
#extension GL_GOOGLE_include_directive : require
// The last dispatch of a step: the GPU feeds the token it chose to the next step (step.token,
// step.pos + 1) and appends it to a host-visible ring, so the host can submit step t+1 before it
// has read token t (pipelined replay) while every recorded command stays the same. With GRID_ARGS
// it also sizes the next step's indirect attention grids to its position (attn_live.glsl).
// Bindings: 0 next_token, 1 step (read-write), 2 ring, (GRID_ARGS) 3 grid records. Spec: 0 ring length.
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint RING = 64;

layout(binding = 0) readonly buffer TB { uint next_token[]; };
layout(binding = 1) buffer SB { uint step_buf[]; };
layout(binding = 2) writeonly buffer RB { uint ring[]; };
#include "attn_live.glsl"

void main() {
    uint tok = next_token[0];
    uint pos = step_buf[1];
    ring[pos % RING] = tok;
    step_buf[0] = tok;
    step_buf[1] = pos + 1u;
#ifdef GRID_ARGS
    grid_args_update(pos + 1u);
#endif
}

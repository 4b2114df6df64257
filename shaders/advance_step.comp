#version 450
// The last dispatch of a step: the GPU feeds the token it chose to the next step (step.token,
// step.pos + 1) and appends it to a host-visible ring, so the host can submit step t+1 before it
// has read token t (pipelined replay) while every recorded command stays the same.
// Bindings: 0 next_token, 1 step (read-write), 2 ring. Spec: 0 ring length.
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint RING = 64;

layout(binding = 0) readonly buffer TB { uint next_token[]; };
layout(binding = 1) buffer SB { uint step_buf[]; };
layout(binding = 2) writeonly buffer RB { uint ring[]; };

void main() {
    uint tok = next_token[0];
    uint pos = step_buf[1];
    ring[pos % RING] = tok;
    step_buf[0] = tok;
    step_buf[1] = pos + 1u;
}

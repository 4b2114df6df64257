// A grid barrier over device-scope atomics, for dispatches whose workgroups are all resident
// (persistent_ffn_qkv.comp; stream_phases.comp, a bench probe). The includer declares
// sync_w[] (2 counters, coherent, zero between dispatches), err_w[] (the error word) and a push
// constant block `pc` with `spin`, the polls a wait makes before it gives up: it then sets the
// error word instead of hanging where the grid is not resident.

// Grid barrier n (1, 2, ...) of this dispatch: every workgroup's writes so far are visible to every
// workgroup after it. Call from uniform control flow (contains barrier()).
void grid_sync(uint n) {
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationIndex == 0u) {
        atomicAdd(sync_w[0], 1u);
        const uint want = n * gl_NumWorkGroups.x;
        uint i = 0u;
        while (atomicAdd(sync_w[0], 0u) < want && i < pc.spin) i++;
        if (i == pc.spin) atomicOr(err_w[0], 1u);
        memoryBarrierBuffer();
    }
    barrier();
}

// The last workgroup to leave zeroes the counters for the next dispatch: every workgroup has
// passed its last wait before it counts as departed, so nothing still polls them.
void grid_leave() {
    if (gl_LocalInvocationIndex == 0u && atomicAdd(sync_w[1], 1u) == gl_NumWorkGroups.x - 1u) {
        atomicExchange(sync_w[0], 0u);
        atomicExchange(sync_w[1], 0u);
    }
}

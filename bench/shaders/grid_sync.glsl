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

#ifdef GRID_SPLIT
// Grid barrier n in two halves, for a caller that issues loads between them
// (stream_phases.comp): grid_arrive releases the invocation's writes with a device-scope fence
// while it has no loads in flight, so the fence waits for nothing else, and the workgroup arrives;
// grid_wait polls the counter with acquire loads (no fence behind the caller's loads in flight).
// all_acquire: the final workgroup barrier acquires at device scope too (the formally complete
// form); without it the other invocations should read what the grid wrote with device-scope atomic
// loads. The includer enables GL_KHR_memory_scope_semantics.
void grid_arrive(uint n) {
    memoryBarrier(gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelease);
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, 0, 0);
    if (gl_LocalInvocationIndex == 0u)
        atomicAdd(sync_w[0], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelease);
}

void grid_wait(uint n, bool all_acquire) {
    if (gl_LocalInvocationIndex == 0u) {
        const uint want = n * gl_NumWorkGroups.x;
        uint i = 0u;
        while (atomicLoad(sync_w[0], gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquire) < want
               && i < pc.spin) i++;
        if (i == pc.spin) atomicOr(err_w[0], 1u);
    }
    if (all_acquire)
        controlBarrier(gl_ScopeWorkgroup, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsAcquireRelease);
    else
        controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, 0, 0);
}
#endif

// The last workgroup to leave zeroes the counters for the next dispatch: every workgroup has
// passed its last wait before it counts as departed, so nothing still polls them.
void grid_leave() {
    if (gl_LocalInvocationIndex == 0u && atomicAdd(sync_w[1], 1u) == gl_NumWorkGroups.x - 1u) {
        atomicExchange(sync_w[0], 0u);
        atomicExchange(sync_w[1], 0u);
    }
}

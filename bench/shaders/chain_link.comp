#version 450
// One link of a dependent chain handed over by device-scope atomics instead of a pipeline
// barrier: wait until every workgroup of the previous link has signalled, read what it wrote,
// write, signal. bench/dispatch_chain.py times it; the check tells whether the hand-over held.
// GRID defined: all links run in ONE dispatch of resident workgroups (a grid barrier between
// links, each workgroup looping over the link's virtual workgroups).
// Bindings: 0 sync {count, err}, 1 a, 2 b. Spec: 0 workgroup size, 1 N elements, 2 spin bound,
// 3 links (GRID). POLL_LOAD: poll the count with loads, not atomics. Push: link index (chain), virtual groups per link.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint N = 1024;
layout(constant_id = 2) const uint SPIN = 1048576;
layout(constant_id = 3) const uint LINKS = 1;

layout(binding = 0) coherent buffer Sync { uint count; uint err; } s;
// volatile alone: glslang decorates it Coherent too, and `volatile coherent` decorated each member
// Coherent twice, which the 1.4 validation layer's spirv-val rejects
layout(binding = 0) volatile buffer SyncV { uint count; uint err; } sv;
layout(binding = 1) coherent buffer A { float a[]; };
layout(binding = 2) coherent buffer B { float b[]; };
layout(push_constant) uniform P { uint link; uint groups; } pc;

// Bounded: where workgroups or dispatches do not run concurrently the wait gives up and flags
// the failure instead of hanging the device.
void wait_count(uint want) {
    if (gl_LocalInvocationID.x == 0u) {
        uint i = 0u;
#ifdef POLL_LOAD
        // a plain (volatile) load per poll instead of an atomic read-modify-write
        while (sv.count < want && i < SPIN) i++;
#else
        while (atomicAdd(s.count, 0u) < want && i < SPIN) i++;
#endif
        if (i == SPIN) atomicOr(s.err, 1u);
        memoryBarrierBuffer();
    }
    barrier();
}

void signal_count() {
    memoryBarrierBuffer();
    barrier();
    if (gl_LocalInvocationID.x == 0u) atomicAdd(s.count, 1u);
}

void link_body(uint link, uint vgroup) {
    uint x = vgroup * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint src = (x * 7u + 13u) % N;  // reads another workgroup's output: a real dependency
    if (x < N) {
        if (link % 2u == 0u) b[x] = a[src] + 1.0; else a[x] = b[src] + 1.0;
    }
}

void main() {
#ifdef GRID
    for (uint link = 0u; link < LINKS; link++) {
        if (link > 0u) wait_count(link * gl_NumWorkGroups.x);
        for (uint g = gl_WorkGroupID.x; g < pc.groups; g += gl_NumWorkGroups.x) link_body(link, g);
        signal_count();
    }
#else
    wait_count(pc.link * pc.groups);
    link_body(pc.link, gl_WorkGroupID.x);
    signal_count();
#endif
}

// Weight prefetch into the GPU's last-level cache from a latency-bound dispatch (fused_prefetch.py).
// The fused attention waits on chains of dependent loads and leaves DRAM idle; extra workgroups
// appended to its grid read the weights the next dispatches will stream (the o-projection, the
// FFN), so those find them in L2. One 4-byte load per 32-byte sector (the unit L2 fills), the
// PF_UNROLL loads of an invocation issued together, the loaded words folded into one value that
// a practically never-true test writes to a sink (so no load is dead code).
// Defines (all set by fused_prefetch.py): PF_N buffers, for each j < PF_N: PF_B<j> its binding and
// PF_W<j> its sectors; PF_SINK the sink binding; PF_G prefetch workgroups. Needs STEP binding
// `step` (the seed word makes the sink test depend on a runtime value).
#ifdef PF_N
#define PF_UNROLL 8
#define PF_WORDS 8u   // uint words per 32-byte sector

layout(binding = PF_SINK) buffer PfSink { uint pf_sink[]; };
#define PF_BUF(j) layout(binding = PF_B##j) readonly buffer Pf##j { uint pf##j[]; };
PF_BUF(0)
#if PF_N > 1
PF_BUF(1)
#endif
#if PF_N > 2
PF_BUF(2)
#endif
#if PF_N > 3
PF_BUF(3)
#endif
#if PF_N > 4
PF_BUF(4)
#endif
#if PF_N > 5
PF_BUF(5)
#endif

// Sectors i, i + stride, ... of buffer j, PF_UNROLL at a time; each index is clamped into the
// buffer instead of branching, so every load of a round is in flight together.
#define PF_SWEEP(j, acc, i, stride) \
    for (uint k0 = (i); k0 < PF_W##j; k0 += PF_UNROLL * (stride)) { \
        uint w[PF_UNROLL]; \
        for (uint u = 0; u < PF_UNROLL; u++) w[u] = pf##j[min(k0 + u * (stride), PF_W##j - 1u) * PF_WORDS]; \
        for (uint u = 0; u < PF_UNROLL; u++) acc ^= w[u]; \
    }

// Workgroup g (< PF_G) of the prefetch part of the grid.
void prefetch(uint g) {
    if (g >= PF_G) return;   // an indirect grid's last prefetch row may run past PF_G (attn_live.glsl)
    const uint stride = PF_G * gl_WorkGroupSize.x;
    const uint i = g * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    uint acc = 0u;
    PF_SWEEP(0, acc, i, stride)
#if PF_N > 1
    PF_SWEEP(1, acc, i, stride)
#endif
#if PF_N > 2
    PF_SWEEP(2, acc, i, stride)
#endif
#if PF_N > 3
    PF_SWEEP(3, acc, i, stride)
#endif
#if PF_N > 4
    PF_SWEEP(4, acc, i, stride)
#endif
#if PF_N > 5
    PF_SWEEP(5, acc, i, stride)
#endif
    // true about once in 2^32 invocations; the sink is never read
    if (acc == (step[STEP_SEED] ^ 0x9e3779b9u)) atomicOr(pf_sink[0], 1u);
}
#endif

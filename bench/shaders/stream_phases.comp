#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_memory_scope_semantics : require
// PROBE (bench/stream_floor.py --phases): four stream_read.comp phases in one dispatch of resident
// workgroups, a grid barrier between phases (grid_sync.glsl, as persistent_ffn_qkv.comp), against
// the same four reads as four dispatches with pipeline barriers: what merging a layer's matvec
// dispatches could save if its phases streamed like a plain read.
// Each phase ends by writing one word per invocation (the "activation" it hands on) and the next
// reads another workgroup's word after the barrier, so every phase waits on a real dependency.
// PRE = 1 issues a phase's first pass of loads BEFORE the grid barrier that precedes it: weights
// do not depend on the previous phase, so their latency can hide behind the barrier (with one pass
// per phase, P0-P3 sized to cover its words, the whole phase is in flight while the grid waits).
// PRE = 2 splits the grid barrier in two around those loads: each invocation releases its hand-off
// word (a device-scope release fence, while it has no loads outstanding), the workgroup arrives,
// THEN every invocation issues its loads, then the workgroup waits (acquire loads of the counter)
// and reads the hand-off with device-scope atomic loads. A fence issued while loads are in flight
// may wait for them (memoryBarrierBuffer in grid_sync.glsl does, it seems, on an H100), which
// would serialise PRE = 1's loads with the barrier. PRE = 3 is PRE = 2 with the final workgroup
// barrier acquiring too (the formally complete form).
// Measured and removed (bench/results/nvidia-h100-80gb-hbm3/2026-11-26-session/): a grid barrier
// whose waits poll a flag word instead of the arrival counter, and loader workgroups outside the
// barriers reading phases 1-3 ahead into L2. Neither was faster.
// Bindings: 0-3 the phases' words, 4 sync (2 counters, zero between dispatches), 5 error word,
// 6 dst, 7 hand-off words (2 x 2^18). Spec: 0 workgroup size, 1-4 words per phase, 5-8 loads per
// invocation per pass of each phase, 9 PRE.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint W0 = 1;
layout(constant_id = 2) const uint W1 = 1;
layout(constant_id = 3) const uint W2 = 1;
layout(constant_id = 4) const uint W3 = 1;
layout(constant_id = 5) const uint P0 = 1;
layout(constant_id = 6) const uint P1 = 1;
layout(constant_id = 7) const uint P2 = 1;
layout(constant_id = 8) const uint P3 = 1;
layout(constant_id = 9) const uint PRE = 0;
layout(binding = 0) readonly buffer S0 { uvec4 src0[]; };
layout(binding = 1) readonly buffer S1 { uvec4 src1[]; };
layout(binding = 2) readonly buffer S2 { uvec4 src2[]; };
layout(binding = 3) readonly buffer S3 { uvec4 src3[]; };
layout(binding = 4) coherent buffer SyncB { uint sync_w[]; };
layout(binding = 5) coherent buffer ErrB { uint err_w[]; };
layout(binding = 6) writeonly buffer DB { uint dst[]; };
layout(binding = 7) coherent buffer HB { uint hand_w[]; };
layout(push_constant) uniform Push { uint spin; } pc;

#define HAND 262144u
#define FIRST(P) (gl_WorkGroupID.x * wg * (P) + gl_LocalInvocationID.x)
#define STEP(P) (gl_NumWorkGroups.x * wg * (P))
#define LOAD(SRC, WORDS, P, base, v) for (uint j = 0; j < (P); j++) v[j] = SRC[min((base) + j * wg, (WORDS) - 1)];
#define FOLD(P, v) for (uint j = 0; j < (P); j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
#define REST(SRC, WORDS, P, from) \
    for (uint base = (from); base < (WORDS); base += STEP(P)) { uvec4 v[P]; LOAD(SRC, WORDS, P, base, v) FOLD(P, v) }
// phase N (1-3): first pass loaded before or after barrier N, the hand-off read after it
#define PHASE(N, SRC, WORDS, P) { \
    const uint b0 = FIRST(P); \
    uvec4 v0[P]; \
    if (PRE >= 2u) { \
        hand_w[((N) & 1u) * HAND + me] = acc; \
        grid_arrive(N); \
        LOAD(SRC, WORDS, P, b0, v0) \
        grid_wait(N, PRE == 3u); \
        acc ^= atomicLoad(hand_w[((N) & 1u) * HAND + (me + wg) % total], gl_ScopeDevice, \
                          gl_StorageSemanticsBuffer, gl_SemanticsRelaxed); \
    } else { \
        if (PRE == 1u) { LOAD(SRC, WORDS, P, b0, v0) } \
        hand_w[((N) & 1u) * HAND + me] = acc; \
        grid_sync(N); \
        acc ^= hand_w[((N) & 1u) * HAND + (me + wg) % total]; \
        if (PRE == 0u) { LOAD(SRC, WORDS, P, b0, v0) } \
    } \
    FOLD(P, v0) \
    REST(SRC, WORDS, P, b0 + STEP(P)) }

#define GRID_SPLIT
#include "grid_sync.glsl"

void main() {
    const uint wg = gl_WorkGroupSize.x;
    const uint me = gl_WorkGroupID.x * wg + gl_LocalInvocationID.x, total = gl_NumWorkGroups.x * wg;
    uint acc = 0u;
    REST(src0, W0, P0, FIRST(P0))
    PHASE(1u, src1, W1, P1)
    PHASE(2u, src2, W2, P2)
    PHASE(3u, src3, W3, P3)
    if (acc == 0x9E3779B9u) dst[gl_WorkGroupID.x] = acc;
    grid_leave();
}

#version 450
#extension GL_GOOGLE_include_directive : require
// PROBE (bench/stream_floor.py --phases): four stream_read.comp phases in one dispatch of resident
// workgroups, a grid barrier between phases (grid_sync.glsl, as persistent_ffn_qkv.comp), against
// the same four reads as four dispatches with pipeline barriers: what merging a layer's matvec
// dispatches could save if its phases streamed like a plain read.
// Bindings: 0-3 the phases' words, 4 sync (2 counters, zero between dispatches), 5 error word,
// 6 dst. Spec: 0 workgroup size, 1-4 words per phase, 5 loads in flight per invocation.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint W0 = 1;
layout(constant_id = 2) const uint W1 = 1;
layout(constant_id = 3) const uint W2 = 1;
layout(constant_id = 4) const uint W3 = 1;
layout(constant_id = 5) const uint PER = 1;
layout(binding = 0) readonly buffer S0 { uvec4 src0[]; };
layout(binding = 1) readonly buffer S1 { uvec4 src1[]; };
layout(binding = 2) readonly buffer S2 { uvec4 src2[]; };
layout(binding = 3) readonly buffer S3 { uvec4 src3[]; };
layout(binding = 4) coherent buffer SyncB { uint sync_w[]; };
layout(binding = 5) coherent buffer ErrB { uint err_w[]; };
layout(binding = 6) writeonly buffer DB { uint dst[]; };
layout(push_constant) uniform Push { uint spin; } pc;

#define PHASE(SRC, WORDS)                                                                          \
    for (uint base = gl_WorkGroupID.x * wg * PER + gl_LocalInvocationID.x; base < WORDS; base += step) { \
        uvec4 v[PER];                                                                              \
        for (uint j = 0; j < PER; j++) v[j] = SRC[min(base + j * wg, WORDS - 1)];                 \
        for (uint j = 0; j < PER; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;                  \
    }

#include "grid_sync.glsl"

void main() {
    const uint wg = gl_WorkGroupSize.x, step = gl_NumWorkGroups.x * wg * PER;
    uint acc = 0u;
    PHASE(src0, W0)
    grid_sync(1u);
    PHASE(src1, W1)
    grid_sync(2u);
    PHASE(src2, W2)
    grid_sync(3u);
    PHASE(src3, W3)
    if (acc == 0x9E3779B9u) dst[gl_WorkGroupID.x] = acc;
    grid_leave();
}

#version 450
// Reads WORDS uvec4s and folds them into one word per invocation, written only when it hits an
// unlikely value (so the loads stay live): the floor of a dispatch that streams a matvec's weight
// bytes, with no x, no math and no reduction (bench/stream_floor.py). Each invocation issues PER
// loads, WG apart, before using them. Bindings: 0 src, 1 dst. Spec: 0 workgroup size, 1 words,
// 2 loads in flight per invocation.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint WORDS = 1;
layout(constant_id = 2) const uint PER = 1;
layout(binding = 0) readonly buffer SB { uvec4 src[]; };
layout(binding = 1) writeonly buffer DB { uint dst[]; };

void main() {
    const uint wg = gl_WorkGroupSize.x, step = gl_NumWorkGroups.x * wg * PER;
    uint acc = 0u;
    for (uint base = gl_WorkGroupID.x * wg * PER + gl_LocalInvocationID.x; base < WORDS; base += step) {
        uvec4 v[PER];
        for (uint j = 0; j < PER; j++) v[j] = src[min(base + j * wg, WORDS - 1)];
        for (uint j = 0; j < PER; j++) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    if (acc == 0x9E3779B9u) dst[gl_WorkGroupID.x] = acc;
}

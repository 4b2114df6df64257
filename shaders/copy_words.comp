#version 450
// dst = src in 16-byte words, grid-stride: the bandwidth reference of `vkdecode bench` (a compute
// copy reads and writes memory the way the matvec kernels read weights; vkCmdCopyBuffer may take
// a slower path on some drivers). Bindings: 0 src, 1 dst. Spec: 0 workgroup size, 1 words.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint WORDS = 1;
layout(binding = 0) readonly buffer SB { uvec4 src[]; };
layout(binding = 1) writeonly buffer DB { uvec4 dst[]; };

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < WORDS; i += stride) dst[i] = src[i];
}

#version 450
#extension GL_GOOGLE_include_directive : require
// f16_rows: a chunk's f32 activations rounded to f16 once, for the tensor-core matmul's XF16 loader
// (coop_xf16): every workgroup along the weight rows reads the whole x tile again, so f16 halves
// those reads. The loader rounded each value to f16 anyway: the products are the same.
// Bindings: 0 x (vec4), 1 y (4 halves per uvec2). Spec: 0 wg size, 1 N4 (vec4s).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N4 = 1;
layout(binding = 0) readonly buffer XB { vec4 x[]; };
layout(binding = 1) writeonly buffer YB { uvec2 y[]; };

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i < N4) y[i] = uvec2(packHalf2x16(x[i].xy), packHalf2x16(x[i].zw));
}

#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_GOOGLE_include_directive : require
// dst = f16(src), four elements an invocation, grid-stride: a chunk's activations rounded to f16
// once, for the tensor-core matmuls that read them (matmul_rows_coop.comp X_F16). The tile loader
// otherwise converts every x element once per weight tile that reads it (12 times an element in a
// Qwen3-30B-A3B expert's gate), at the conversion rate (an eighth of the f32 FMA rate on NVIDIA).
// ROW_SCALE (architectures whose activations pass f16's 65504: Gemma 3, Architecture.coop_row_scale):
// one workgroup per row; a row whose max |x| reaches 2^ROW_MAX_EXP is divided by the least power of
// two that brings it under, and that power goes to row_scale[row] (1.0 for the rest, whose halves
// are the plain conversion's bit for bit); matmul_rows_coop multiplies the row's sums back.
// Powers of two scale exactly, so only f16's precision is lost, never its range.
// Bindings: 0 src (f32), 1 dst (f16), ROW_SCALE: 2 row_scale (f32 a row).
// Spec: 0 workgroup size, 1 QUADS (elements / 4; ROW_SCALE: of one row).
#ifdef ROW_SCALE
#include "common.glsl"
#else
layout(local_size_x_id = 0) in;
#endif
layout(constant_id = 1) const uint QUADS = 1;
layout(binding = 0) readonly buffer SB { vec4 src[]; };
layout(binding = 1) writeonly buffer DB { uvec2 dst[]; };

uvec2 half4(vec4 v) {
    return uvec2(packFloat2x16(f16vec2(v.xy)), packFloat2x16(f16vec2(v.zw)));
}

#ifdef ROW_SCALE
const int ROW_MAX_EXP = 15;  // scaled rows keep max |x| < 2^15: f16's largest finite is 65504
layout(binding = 2) writeonly buffer RB { float row_scale[]; };

void main() {
    const uint row = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, base = row * QUADS;
    float top = 0.0;
    for (uint i = t; i < QUADS; i += gl_WorkGroupSize.x) {
        const vec4 a = abs(src[base + i]);
        top = max(top, max(max(a.x, a.y), max(a.z, a.w)));
    }
    top = wg_max(top);
    int e;
    frexp(top, e);  // top < 2^e
    const int shift = max(0, e - ROW_MAX_EXP);
    const float down = ldexp(1.0, -shift);
    if (t == 0) row_scale[row] = ldexp(1.0, shift);
    for (uint i = t; i < QUADS; i += gl_WorkGroupSize.x) dst[base + i] = half4(src[base + i] * down);
}
#else
void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < QUADS; i += stride) dst[i] = half4(src[i]);
}
#endif

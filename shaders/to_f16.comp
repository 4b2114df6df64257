#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// dst = f16(src), four elements an invocation, grid-stride: a chunk's activations rounded to f16
// once, for the tensor-core matmuls that read them (matmul_rows_coop.comp X_F16). The tile loader
// otherwise converts every x element once per weight tile that reads it (12 times an element in a
// Qwen3-30B-A3B expert's gate), at the conversion rate (an eighth of the f32 FMA rate on NVIDIA).
// Bindings: 0 src (f32), 1 dst (f16). Spec: 0 workgroup size, 1 QUADS (elements / 4).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint QUADS = 1;
layout(binding = 0) readonly buffer SB { vec4 src[]; };
layout(binding = 1) writeonly buffer DB { uvec2 dst[]; };

void main() {
    const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < QUADS; i += stride) {
        const vec4 v = src[i];
        dst[i] = uvec2(packFloat2x16(f16vec2(v.xy)), packFloat2x16(f16vec2(v.zw)));
    }
}

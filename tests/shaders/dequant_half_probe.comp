#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
// Test shader for dequant_half.glsl (tests/quant/test_dequant_half.py): y[r * K / 4 + j] =
// dequant_half of quad j of weight row r, for ROWS rows of in-dim K; define the dtype's DT_*.
// Spec: 0 workgroup size, 1 K, 2 ROWS. Bindings: 0 weight words (q or data), 1 scales, 2 Y.
#define NO_WG_REDUCE
#include "common.glsl"
#define B_W 0
#define B_S 1
#include "dequant.glsl"
#include "dequant_half.glsl"
layout(constant_id = 1) const uint K = 256;
layout(constant_id = 2) const uint ROWS = 1;
layout(binding = 2) writeonly buffer Y { uvec2 y[]; };

void main() {
    const uint i = gl_GlobalInvocationID.x;
    if (i < ROWS * K / 4) {
        const uint r = i / (K / 4);
        y[i] = dequant_half(r * ROW_WORDS(K), r * ROW_SCALES(K), 4 * (i % (K / 4)));
    }
}

#version 450
#extension GL_GOOGLE_include_directive : require
// xplanes: a batched step's x rows as split wide K-quant units on integer dot products take them
// (dequant.glsl KQ_IDOT), made once a step instead of by every workgroup for every unit: each
// 16-element group g of row r becomes KQ_PLANES byte planes and the factor 2^-s (kw_planes) and the
// sum of its activations (kw_xsum16), the same arithmetic, so the matvecs' results keep their bits.
// Layout (matmul.comp KW_XPLANES reads it): uvec4 planes [r][k < KQ_PLANES][g], then vec2 (2^-s, sum)
// [r][g]: a lane's loads of one plane sit next to its neighbours'. rms_norm.comp and silu_mul.comp
// (XPLANES) write the same for their outputs; this kernel serves other producers (attention).
// Bindings: 0 x (R rows of DIM floats), 1 planes. Spec: 0 workgroup size, 1 DIM, 2 R.
#define NO_WG_REDUCE
#include "common.glsl"
#include "kw_planes.glsl"

layout(constant_id = 1) const uint DIM = 16;
layout(constant_id = 2) const uint R = 1;
layout(binding = 0) readonly buffer XB { vec4 x4[]; };
layout(binding = 1) writeonly buffer PB { uvec4 p4[]; };
layout(binding = 1) writeonly buffer FB { vec2 pf[]; };

void main() {
    const uint G = DIM / 16, i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= R * G) return;
    const uint r = i / G, g = i % G;
    vec4 x[4];
    for (uint j = 0; j < 4; j++) x[j] = x4[4 * i + j];   // row r's group g: vec4s 4i.. of x
    KW_PLANES_STORE(x, r, g, G, R, kw_xsum16(x));
}

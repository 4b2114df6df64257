#version 450
#extension GL_GOOGLE_include_directive : require
// MATMUL_ADD: y = r + W @ x (output / down projection accumulating into the residual stream), the
// add done in the matvec epilogue: one dispatch and no intermediate W @ x buffer.
// Bindings: f32/f16: 0 W data, 1 x, 2 r, 3 y; quant: 0 q words, 1 scales, 2 x, 3 r, 4 y.
// Spec and push as matmul.comp (matvec.glsl): 0 wg size, 1 K, 2 M, 3 ROWS; push row0.
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_X 1
#else
#define B_S 1
#define B_X 2
#endif
#define B_R (B_X + 1)
#define B_Y (B_X + 2)

layout(binding = B_X) readonly buffer X1B { float x1[]; };
layout(binding = B_X) readonly buffer X4B { vec4 x4[]; };
layout(binding = B_R) readonly buffer RB { float r[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };
#define X1(i) x1[i]
#define X4(i) x4[i]
#define MV_STORE(row, v) y[row] = r[row] + (v)

#include "dequant.glsl"
#include "matvec.glsl"

void main() { matvec_main(); }

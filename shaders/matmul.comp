#version 450
#extension GL_GOOGLE_include_directive : require
// matmul (matvec): y = W @ x, W of any weight dtype (define DT_*), math in f32.
// Bindings: f32/f16: 0 W data, 1 x, 2 y; quant: 0 q words, 1 scales, 2 x, 3 y.
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_X 1
#else
#define B_S 1
#define B_X 2
#endif
#define B_Y (B_X + 1)

layout(binding = B_X) readonly buffer X1B { float x1[]; };
layout(binding = B_X) readonly buffer X4B { vec4 x4[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };
#ifdef MV_XROWS
// a batched decode step (matvec.glsl sets mv_xrow): x rows of XDIM (spec 5), y rows of MTOT
layout(constant_id = 5) const uint XDIM = 4;
uint mv_xrow = 0u;
#define X1(i) x1[mv_xrow * XDIM + (i)]
#define X4(i) x4[mv_xrow * (XDIM / 4) + (i)]
#define MV_STORE(row, v) y[mv_xrow * MTOT + (row)] = (v)
#else
#define X1(i) x1[i]
#define X4(i) x4[i]
#define MV_STORE(row, v) y[row] = (v)
#endif

#include "dequant.glsl"
#include "matvec.glsl"

void main() { matvec_main(); }

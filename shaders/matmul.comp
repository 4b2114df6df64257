#version 450
#extension GL_GOOGLE_include_directive : require
// matmul (matvec): y = W @ x, W of any weight dtype (define DT_*), math in f32.
// Bindings: f32/f16: 0 W data, 1 x, 2 y; quant: 0 q words, 1 scales, 2 x, 3 y, 4 x planes (KW_XPLANES).
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

#ifdef KW_XPLANES
// x as xplanes.comp wrote it once for the step (split wide units on integer dot products,
// kwide_rows.glsl KW_XP): group g of x row r is planes xp4[(P r + k) G + g], k < P = KQ_PLANES,
// and (2^-s, sum) xpf[2 P XR G + r G + g], G = K / 16 groups a row (kw_planes.glsl)
layout(binding = B_Y + 1) readonly buffer XPB { uvec4 xp4[]; };
layout(binding = B_Y + 1) readonly buffer XFB { vec2 xpf[]; };
#ifdef MV_XROWS
#define XP_ROW mv_xrow
#else
#define XP_ROW 0u
#endif
#define KW_XP(g, p, inv, xs) { \
    const uint xp_g = K / 16u, xp_i = XP_ROW * xp_g + (g); \
    for (uint k = 0; k < KQ_PLANES; k++) p[k] = xp4[(KQ_PLANES * XP_ROW + k) * xp_g + (g)]; \
    const vec2 xp_f = xpf[2u * KQ_PLANES * XR * xp_g + xp_i]; \
    inv = xp_f.x; \
    xs = xp_f.y; \
}
#endif

#include "dequant.glsl"
#include "matvec.glsl"

void main() { matvec_main(); }

#version 450
#extension GL_GOOGLE_include_directive : require
// MOE_MATMUL_SUM_ADD: the experts' down projections, their router-weighted sum and the residual add
// in one matvec: y[r] = res[r] + sum_j sw[j] * (W[ids[j]] row r . x_j), x_j = x[j*K ..] the
// SwiGLU output of slot j (matvec.glsl MV_SLOTS). Bindings: 0 W (quant: 0 q, 1 scales), then x,
// ids, sw (slot weights), res, y. Spec: 0 wg size, 1 K, 2 M, 3 ROWS, 4 SLOTS, 5 K again.
// BIAS (gpt-oss, MOE_MATMUL_BIAS_SUM_ADD): binding B_Y + 1 holds the experts' bias rows (experts x
// M), each slot's expert's row weighted as its output: y[r] += sum_j sw[j] * b[ids[j]][r].
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_X 1
#else
#define B_S 1
#define B_X 2
#endif
#define B_IDS (B_X + 1)
#define B_SW (B_X + 2)
#define B_RES (B_X + 3)
#define B_Y (B_X + 4)

layout(constant_id = 4) const uint SLOTS = 1;
layout(constant_id = 5) const uint XK = 32;

layout(binding = B_X) readonly buffer X1B { float x1[]; };
layout(binding = B_X) readonly buffer X4B { vec4 x4[]; };
layout(binding = B_IDS) readonly buffer IDB { uint ids[]; };
layout(binding = B_SW) readonly buffer SWB { float sw_slot[]; };
layout(binding = B_RES) readonly buffer RB { float res[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };

uint mv_slot = 0u;
#define X1(i) x1[mv_slot * XK + (i)]
#define X4(i) x4[mv_slot * (XK / 4) + (i)]
#define MV_SLOTS SLOTS
#define MV_ROW_BASE(j) (ids[j] * M)
#define MV_SLOT_WEIGHT(j) sw_slot[j]
#include "norm_out.glsl"   // NORM_OUT: the next norm's inputs too (lowering/norm_pre.py)
#ifdef BIAS
layout(binding = B_Y + 1) readonly buffer BiasB { float bias[]; };
float slots_bias(uint row);  // after matvec.glsl, which declares M
#define MV_STORE(row, v) MV_OUT(row, res[row] + (v) + slots_bias(row))
#else
#define MV_STORE(row, v) MV_OUT(row, res[row] + (v))
#endif

#include "dequant.glsl"
#include "matvec.glsl"

#ifdef BIAS
float slots_bias(uint row) {
    float s = 0.0;
    for (uint j = 0; j < SLOTS; j++) s += sw_slot[j] * bias[ids[j] * M + row];
    return s;
}
#endif

void main() { matvec_main(); }

#version 450
#extension GL_GOOGLE_include_directive : require
// MATMUL_ADD: y = r + W @ x (output / down projection accumulating into the residual stream), the
// add done in the matvec epilogue: one dispatch and no intermediate W @ x buffer.
// Bindings: f32/f16: 0 W data, 1 x, 2 r, 3 y; quant: 0 q words, 1 scales, 2 x, 3 r, 4 y.
// BIAS (MATMUL_BIAS_ADD): y = r + (W @ x + b), b bound after y.
// COMBINE_X (defines CX_H, CX_D, CX_S, CX_MAXCHUNK, CX_MIN_S, CX_WINDOW: the attention's grid, and
// CX_B: splits combined per batch): x is
// split-K attention partials, combined on load; the step buffer is bound last (after y, and b).
// GATED_NORM (RMS_NORM_SILU_MUL_MATMUL_ADD): x is o, normed per head and gated by silu(z) as it is
// loaded (gated_norm.glsl); z and the norm weight bound after y, spec constants 4..7 its own.
// SIGMOID_OUT (MATMUL_SIGMOID_SCALE_ADD, a gated shared expert's down): y = r + sigmoid(g) * (W @ x),
// g one float (the gate logit); SIGMOID_X (SIGMOID_SCALE_MATMUL_ADD, Qwen3.5's gated attention
// output): y = r + W @ (sigmoid(g) * x), a g an element. g bound after y: either define alone.
// Spec and push as matmul.comp (matvec.glsl): 0 wg size, 1 K, 2 M, 3 ROWS; push row0.
#define NO_WG_REDUCE
#include "common.glsl"
#if (defined(SIGMOID_OUT) || defined(SIGMOID_X)) && \
    (defined(BIAS) || defined(COMBINE_X) || defined(GATED_NORM) || (defined(SIGMOID_OUT) && defined(SIGMOID_X)))
#error "SIGMOID_OUT and SIGMOID_X bind g where BIAS, COMBINE_X, GATED_NORM and each other bind theirs"
#endif

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
#ifdef BIAS
layout(binding = B_X + 3) readonly buffer BB { float bias[]; };
#endif
#ifdef COMBINE_X
// x is split-K attention's partials (CX_S splits of CX_H heads of CX_D, attn_partials.glsl), and
// each element is combined over the splits as it is loaded: the o-projection does the combine, so
// the attention needs no combine dispatch and no barrier before one.
#include "attn_partials.glsl"
#define CX_ML(s, h) PART_ML(s, h, CX_H, CX_D, CX_S)
layout(binding = B_X) readonly buffer X2B { vec2 x2[]; };   // (m, l) pairs: PART_ML is even
#ifdef BIAS
#define B_STEP (B_X + 4)
#else
#define B_STEP (B_X + 3)
#endif
layout(binding = B_STEP) readonly buffer StepB { uint cx_step[]; };
uint cx_live;   // splits with rows at this position (attn_live_splits); the others are stale

// The live splits of x element(s) at i, combined: sum_s e^(m_s - M) p_s / sum_s e^(m_s - M) l_s over
// the non-empty live splits (l_s > 0, s < cx_live), M their max. CX_B splits at a time (CX_B <=
// CX_S): every load of a batch (partials and (m, l) pairs) is issued before any is used and none
// waits on a loaded value (cx_live is known before), so a batch adds no round trip to the
// matvec's own (a test on a loaded value before the next load made one round trip per split);
// later batches rescale the sums by e^(M_old - M_new). The batch arrays and the trip count
// ceil(cx_live / CX_B) follow the position, not CX_S (the grid, which grows with --ctx): arrays
// of CX_S held 32 vec4 + 32 vec2 per load at ctx 8192 on a GPU grid of 32 splits.
#define CX_COMBINE(T, load) { \
    if (cx_live == 1u) { /* split 0 holds the final o (attention writes it so): a plain load */ \
        const uint s = 0u; \
        return load; \
    } \
    float mx = NEG_INF, l = 0.0; \
    T a = T(0.0); \
    for (uint s0 = 0u; s0 < cx_live; s0 += CX_B) { \
        T p[CX_B]; \
        vec2 ml[CX_B]; \
        for (uint b = 0u; b < CX_B; b++) { \
            const uint s = s0 + b; \
            if (s < cx_live) {   /* uniform: a dead split costs no load and no exp */ \
                p[b] = load; \
                ml[b] = x2[CX_ML(s, h) / 2u]; \
            } \
        } \
        float bm = mx; \
        for (uint b = 0u; b < CX_B; b++) \
            if (s0 + b < cx_live) bm = ml[b].y > 0.0 ? max(bm, ml[b].x) : bm; \
        const float keep = mx == NEG_INF ? 0.0 : exp(mx - bm);   /* l, a are 0 while mx is -inf */ \
        l *= keep; \
        a *= keep; \
        for (uint b = 0u; b < CX_B; b++) { \
            if (s0 + b < cx_live) { \
                const float w = ml[b].y > 0.0 ? exp(ml[b].x - bm) : 0.0; \
                l += w * ml[b].y; \
                a += w * p[b]; \
            } \
        } \
        mx = bm; \
    } \
    return a / l; \
}
float cx1(uint i) {
    const uint h = i / CX_D;
    CX_COMBINE(float, x1[PART_O(s, 0u, i, CX_H, CX_D)])
}
vec4 cx4(uint i) {  // CX_D % 4 == 0: the four elements share a head
    const uint h = 4u * i / CX_D;
    CX_COMBINE(vec4, x4[PART_O(s, 0u, 4u * i, CX_H, CX_D) / 4u])
}
#define X1(i) cx1(i)
#define X4(i) cx4(i)
#elif defined(GATED_NORM)
#define B_Z (B_X + 3)
#define B_GW (B_X + 4)
#include "gated_norm.glsl"
#elif defined(SIGMOID_X)
// sigmoid_scale.comp's x / (1 + exp(-g)), element by element, as x is loaded
layout(binding = B_X + 3) readonly buffer SX1 { float sx1[]; };
layout(binding = B_X + 3) readonly buffer SX4 { vec4 sx4[]; };
#define X1(i) (x1[i] / (1.0 + exp(-sx1[i])))
#define X4(i) (x4[i] / (1.0 + exp(-sx4[i])))
#else
#define X1(i) x1[i]
#define X4(i) x4[i]
#endif
#include "norm_out.glsl"
#ifdef BIAS
#define MV_STORE(row, v) MV_OUT(row, r[row] + ((v) + bias[row]))
#elif defined(SIGMOID_OUT)
layout(binding = B_X + 3) readonly buffer GB { float gate[]; };
// sigmoid_scale.comp's v / (1 + exp(-g)), then add.comp's r + that
#define MV_STORE(row, v) MV_OUT(row, r[row] + (v) / (1.0 + exp(-gate[0])))
#else
#define MV_STORE(row, v) MV_OUT(row, r[row] + (v))
#endif

#include "dequant.glsl"
#include "matvec.glsl"

void main() {
#ifdef GATED_NORM
    gn_norms();
#endif
#ifdef COMBINE_X
#if CX_MIN_S >= CX_S
    cx_live = CX_S;   // a grid no larger than its minimum: every split is live at every position
#else
    cx_live = attn_live_splits(cx_step[STEP_POS], CX_WINDOW, CX_S, CX_MAXCHUNK, CX_MIN_S);
#endif
#endif
    matvec_main();
}

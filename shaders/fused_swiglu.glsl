// Body of matmul_silu_mul.comp and rms_norm_matmul_silu_mul.comp (NORM defined):
// y = silu(W_gate h) * (W_up h), h = x or x / rms(x) * norm_w; with GELU defined (the GeGLU
// variants, rules *_GELU_MUL) y = gelu_tanh(W_gate h) * (W_up h). Workgroup g takes rows
// g*ROWS .. g*ROWS+ROWS-1 of both weights: each output row needs its gate and its up row, so
// gate, up and SwiGLU are one dispatch and neither g nor u goes to memory.
// Bindings (numbers from fused_matvec.py, as defines): B_X x, B_NW norm_w (NORM), WB_0/SB_0 gate,
// WB_1/SB_1 up, B_Y y. Spec: 0 wg size, 1 K, 2 ROWS, 3 EPS, 4 M (rows of each weight).
#define NO_WG_REDUCE
#include "common.glsl"
#define FMV_NR (2 * ROWS + 1)
#include "fused_matvec.glsl"
#include "gelu.glsl"

layout(constant_id = 4) const uint M = 1;
#ifdef MOE
// MOE_MATMUL_SILU_MUL: W_gate / W_up are 3-D (experts, M, K); workgroup g runs slot g / BLOCKS
// (expert ids[slot]: rows from ids[slot] * M) and its row block g % BLOCKS, writing y[slot * M ..]
layout(constant_id = 5) const uint BLOCKS = 1;
#define FSW_SLOT (flat_group_id() / BLOCKS)
#define FSW_BLOCK (flat_group_id() % BLOCKS)
#ifdef MOE_ROUTE
// the top-k in this kernel (moe_route.glsl): spec 6 E (experts), 7 TOPK
layout(constant_id = 6) const uint E = 8;
layout(constant_id = 7) const uint TOPK = 2;
#include "moe_route.glsl"
#define FSW_BASE (moe_expert * M)
#else
layout(binding = B_IDS) readonly buffer MIDS { uint moe_ids[]; };
#define FSW_BASE (moe_ids[FSW_SLOT] * M)
#endif
#else
#define FSW_SLOT 0u
#define FSW_BLOCK flat_group_id()
#define FSW_BASE 0u
#endif

#define SLOT 0
#include "fused_wslot.glsl"
#undef SLOT
#define SLOT 1
#include "fused_wslot.glsl"
layout(binding = B_Y) writeonly buffer YB { float y[]; };
#ifdef BIAS
// RMS_NORM_MATMUL_BIAS_SILU_MUL (Llama mlp_bias): gate and up biases, bindings BB_0 and BB_1; with
// MOE (gpt-oss) each expert's rows of them (experts x M), from FSW_BASE
layout(binding = BB_0) readonly buffer BGB { float b_gate[]; };
layout(binding = BB_1) readonly buffer BUB { float b_up[]; };
#endif

// Gate and up rows first..first+ROWS-1 in one loop: x is loaded once per unit and the 2 * ROWS
// weight loads of a unit are in flight together (one loop per weight: 5.6 vs 5.4 µs per layer on
// an H200 at SmolLM2's shape).
void fmv_rows_gate_up(uint first, uint base) {
    for (uint u = gl_LocalInvocationID.x; u < K / UNIT_ELEMS; u += gl_WorkGroupSize.x) {
#ifdef KW_SPLIT
#define KW_PAIR 1
#define KW_ACC(i) fmv_acc[i]
#define KW_M M
#define KW_BASE base
#include "kwide_rows.glsl"
#undef KW_PAIR
#undef KW_ACC
#undef KW_M
#undef KW_BASE
#else
        vec4 xv[XU_VEC4];
        load_x_0(u, xv);
        for (uint i = 0; i < ROWS; i++) {
            uint r = min(first + i, M - 1) + base;
            fmv_acc[i] += unit_dot_0(r * ROW_WORDS(K), r * ROW_SCALES(K), u, xv);
            fmv_acc[ROWS + i] += unit_dot_1(r * ROW_WORDS(K), r * ROW_SCALES(K), u, xv);
        }
#endif
    }
}

void main() {
    const uint t = gl_LocalInvocationID.x;
#ifdef MOE_ROUTE
    const uint moe_expert = moe_route(FSW_SLOT, flat_group_id() == 0u);
#endif
    const uint first = FSW_BLOCK * ROWS;
    if (first >= M) return;  // padding of a 2-D grid: the whole workgroup leaves together
    fmv_clear();
    fmv_rows_gate_up(first, FSW_BASE);
    fmv_acc[2 * ROWS] = fmv_ss_total();
    fmv_reduce();
    if (t >= ROWS || first + t >= M) return;
    float inv = fmv_inv_rms(fmv_total(2 * ROWS));
    float g = fmv_total(t) * inv, u = fmv_total(ROWS + t) * inv;
#ifdef BIAS
    g += b_gate[FSW_BASE + first + t];
    u += b_up[FSW_BASE + first + t];
#endif
#if defined(GLU_CLAMP)
    // gpt-oss's GLU (swiglu_clamp): c = min(g, limit), c sigmoid(alpha c) (clamp(u, +-limit) + 1)
    const float c = min(g, GLU_LIMIT);
    y[FSW_SLOT * M + first + t] = c / (1.0 + exp(-GLU_ALPHA * c)) * (clamp(u, -GLU_LIMIT, GLU_LIMIT) + 1.0);
#elif defined(GELU)
    y[FSW_SLOT * M + first + t] = gelu_tanh(g) * u;
#else
    y[FSW_SLOT * M + first + t] = g / (1.0 + exp(-g)) * u;
#endif
}

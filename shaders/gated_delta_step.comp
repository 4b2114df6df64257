#version 450
#extension GL_GOOGLE_include_directive : require
// gated_delta_step (fusion/ir.py): Qwen3.5's Gated DeltaNet, one token or a prompt chunk's rows in
// order. Value head h's state S (DK x DV, row-major in s) is split by columns: a workgroup owns
// COLS of them (head h = group / NCB, column block group % NCB), held in shared memory for the
// whole chunk, so a chunk's rows read and write S there and the device buffer is read once and
// written once per call (the kernel before walked S in the buffer three times a row, one workgroup
// a head). Its WG invocations are P = WG / COLS lanes per column: lane p of column jl holds rows
// i = p, p + P, ... and the column's two dot products are summed over its P lanes through red[].
// Per row: the q and k head (h / (HV / HK)) l2-normed into shared memory; decay S by exp(g),
// kv_j = sum_i S_ij k_i, delta_j = (v_j - kv_j) beta, S_ij += k_i delta_j, o_j = sum_i S_ij q_i.
// The state reads as zero at position 0 (whatever the buffer holds: an earlier sequence).
// Bindings: 0 qkv, 1 a[HV], 2 b[HV], 3 a_log[HV], 4 dt_bias[HV], 5 step, 6 o[HV DV], 7 s[HV DK DV]
// (per row where a chunk has rows). Spec: 0 wg size, 1 HK, 2 HV, 3 DK, 4 DV, 5 ROWS, 6 COLS.
// V_TILED: value head h reads key head h % HK (llama.cpp's GGUF order, V heads tiled over the key
// heads), not h / (HV / HK) (HF's grouped order).
#include "common.glsl"

layout(constant_id = 1) const uint HK = 1;
layout(constant_id = 2) const uint HV = 1;
layout(constant_id = 3) const uint DK = 16;
layout(constant_id = 4) const uint DV = 16;
layout(constant_id = 5) const uint ROWS = 1;  // a prompt chunk's rows, in order (1: a decode step)
layout(constant_id = 6) const uint COLS = 16; // state columns a workgroup (a power of two <= WG)

layout(binding = 0) readonly buffer QB { float qkv[]; };
layout(binding = 1) readonly buffer AB { float ga[]; };
layout(binding = 2) readonly buffer BB { float gb[]; };
layout(binding = 3) readonly buffer LB { float a_log[]; };
layout(binding = 4) readonly buffer DB { float dt_bias[]; };
layout(binding = 5) readonly buffer StepB { uint step[]; };
layout(binding = 6) writeonly buffer OB { float o[]; };
layout(binding = 7) buffer SB { float s[]; };

shared float qs[DK];
shared float ks[DK];
shared float st[DK * COLS];             // st[i * COLS + jl]: neighbouring lanes, neighbouring words
shared float red[gl_WorkGroupSize.x];   // a column's partial sums, lane p at p * COLS + jl

// the sum of the P lanes' v of this invocation's column, to each of them
float column_sum(float v, uint tid, uint jl, uint P) {
    if (P == 1u) return v;  // spec constants: the same branch in every invocation
    barrier();  // red's previous sums are read
    red[tid] = v;
    barrier();
    float t = 0.0;
    for (uint p = 0; p < P; p++) t += red[p * COLS + jl];
    return t;
}

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x, P = WG / COLS;
    const uint NCB = (DV + COLS - 1) / COLS;
    const uint h = flat_group_id() / NCB, jl = tid % COLS, p0 = tid / COLS;
    const uint j = (flat_group_id() % NCB) * COLS + jl;
    const bool col = j < DV;            // the last block's columns past DV: barriers only
#ifdef V_TILED
    const uint hk = h % HK, CQ = 2 * HK * DK + HV * DV;
#else
    const uint hk = h / (HV / HK), CQ = 2 * HK * DK + HV * DV;
#endif
    const uint pos = step[STEP_POS];
    const uint base = h * DK * DV;
    for (uint i = p0; i < DK; i += P) st[i * COLS + jl] = (col && pos != 0u) ? s[base + i * DV + j] : 0.0;
    const float a_h = exp(a_log[h]), bias = dt_bias[h];
    for (uint t = 0; t < ROWS; t++) {
        float sq = 0.0, sk = 0.0;
        barrier();  // the previous row's qs, ks are read
        for (uint i = tid; i < DK; i += WG) {
            const float qv = qkv[t * CQ + hk * DK + i], kv = qkv[t * CQ + (HK + hk) * DK + i];
            qs[i] = qv;
            ks[i] = kv;
            sq += qv * qv;
            sk += kv * kv;
        }
        const float nq = inversesqrt(wg_sum(sq) + 1e-6) * inversesqrt(float(DK));
        const float nk = inversesqrt(wg_sum(sk) + 1e-6);
        barrier();  // qs, ks written
        const float x = ga[t * HV + h] + bias;
        const float decay = exp(-a_h * (x > 20.0 ? x : log(1.0 + exp(x))));
        const float beta = 1.0 / (1.0 + exp(-gb[t * HV + h]));
        float kv = 0.0;
        for (uint i = p0; i < DK; i += P) kv += st[i * COLS + jl] * ks[i];
        kv = column_sum(kv, tid, jl, P);
        const float v = col ? qkv[t * CQ + 2 * HK * DK + h * DV + j] : 0.0;
        const float delta = (v - kv * decay * nk) * beta;
        float acc = 0.0;
        for (uint i = p0; i < DK; i += P) {
            const float sv = st[i * COLS + jl] * decay + ks[i] * nk * delta;
            st[i * COLS + jl] = sv;
            acc += sv * qs[i];
        }
        acc = column_sum(acc, tid, jl, P);
        if (col && p0 == 0u) o[t * HV * DV + h * DV + j] = acc * nq;
    }
    if (col)
        for (uint i = p0; i < DK; i += P) s[base + i * DV + j] = st[i * COLS + jl];
}

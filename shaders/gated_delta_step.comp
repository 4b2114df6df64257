#version 450
#extension GL_GOOGLE_include_directive : require
// gated_delta_step (fusion/ir.py): Qwen3.5's Gated DeltaNet, one token or a prompt chunk's rows in
// order (gated_delta_chunk.comp: the rows in blocks). A workgroup holds COLS columns of a value
// head's state in shared memory for the whole call (gated_delta.glsl), so a chunk's rows read and
// write S there and the device buffer is read once and written once per call (the kernel before
// walked S in the buffer three times a row, one workgroup a head); P lanes a column sum its two
// dot products through red[]. Per row: the q and k head l2-normed into shared memory; decay S by
// exp(g), kv_j = sum_i S_ij k_i, delta_j = (v_j - kv_j) beta, S_ij += k_i delta_j,
// o_j = sum_i S_ij q_i. BATCH: the rows are a batched step's sequences (gated_delta.glsl).
#include "common.glsl"
#include "gated_delta.glsl"

shared float qs[DK];
shared float ks[DK];
shared float red[gl_WorkGroupSize.x];   // a column's partial sums, lane p at p * COLS + jl

// the sum of the P lanes' v of this invocation's column, to each of them
float column_sum(float v) {
    if (P == 1u) return v;  // spec constants: the same branch in every invocation
    barrier();  // red's previous sums are read
    red[gl_LocalInvocationID.x] = v;
    barrier();
    float t = 0.0;
    for (uint p = 0; p < P; p++) t += red[p * COLS + jl];
    return t;
}

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
#ifdef BATCH
    // a batched step's row: its own sequence (not the next position of the row before), so the
    // rows run side by side, each at its step record's position and slot
    const uint t0 = flat_group_id() / (HV * NCB);
    if (t0 >= ROWS) return;  // a 2-D grid's spare groups: whole workgroups, before any barrier
    const uint t1 = t0 + 1u;
    delta_load(flat_group_id() % (HV * NCB), step[t0 * STEP_WORDS + STEP_POS], step[t0 * STEP_WORDS + STEP_SLOT]);
#else
    const uint t0 = 0u, t1 = chunk_rows(ROWS);   // a padded chunk: its prompt rows
    delta_load(flat_group_id(), step[STEP_POS], 0u);
    delta_zero_rows(t1);
#endif
    const float a_h = exp(a_log[h]), bias = dt_bias[h];
    for (uint t = t0; t < t1; t++) {
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
        kv = column_sum(kv);
        const float v = col ? qkv[t * CQ + 2 * HK * DK + h * DV + j] : 0.0;
        const float delta = (v - kv * decay * nk) * beta;
        float acc = 0.0;
        for (uint i = p0; i < DK; i += P) {
            const float sv = st[i * COLS + jl] * decay + ks[i] * nk * delta;
            st[i * COLS + jl] = sv;
            acc += sv * qs[i];
        }
        acc = column_sum(acc);
        if (col && p0 == 0u) o[t * HV * DV + h * DV + j] = acc * nq;
    }
    delta_store();
}

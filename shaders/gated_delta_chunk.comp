#version 450
#extension GL_GOOGLE_include_directive : require
// gated_delta_step over a prompt chunk's rows (fusion/ir.py; gated_delta_step.comp is one row), in
// the chunked form of the delta rule: C rows at a time as products within the block instead of a
// state update a row. With D_t = exp(G_t), G_t the block's log decays summed to row t, the
// updates delta_t solve a lower-triangular system
//   delta_t = beta_t (v_t - D_t S^T k_t) - sum_{i<t} beta_t (D_t / D_i) (k_t . k_i) delta_i,
// then o_t = D_t S^T q_t + sum_{i<=t} (D_t / D_i) (q_t . k_i) delta_i and
// S <- D_last S + sum_t (D_last / D_t) k_t delta_t^T (row by row this is the same recurrence:
// decay S, delta = (v - S^T k) beta, S += k delta^T, o = S^T q; q, k l2-normed, q over sqrt(DK)).
// The state's columns in shared memory as gated_delta_step's (gated_delta.glsl); a column's P lanes
// split the block's rows (and the state's rows in its update). The block's q and k rows sit KS =
// DK + 1 floats apart: the pair products read one element of each of a warp's rows at once, and rows
// DK apart would all be in one bank. Spec 7 C: rows a block.
#define NO_WG_REDUCE
#include "common.glsl"
#include "gated_delta.glsl"

layout(constant_id = 7) const uint C = 16;     // rows a block

const uint KS = DK + 1;       // a block row's stride in kc, qc
const uint RLN = gl_WorkGroupSize.x / C;       // lanes a row's norms (the workgroup is >= C)
shared float kc[C * KS];      // the block's keys, normed
shared float qc[C * KS];      // its queries, normed and over sqrt(DK)
shared float mk[C * C];       // mk[t * C + i] = beta_t (D_t / D_i) k_t . k_i, i < t
shared float mq[C * C];       // mq[t * C + i] = (D_t / D_i) q_t . k_i, i <= t
shared float uu[C * COLS];    // delta_t of each column
shared float gc[C], bc[C], nq[C], nk[C];   // G_t, beta_t, the rows' norm factors
shared float eg[C], ed[C];                  // D_t and D_last / D_t
shared float part[2 * gl_WorkGroupSize.x]; // the norms' partial sums, RLN lanes a row

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    delta_load(flat_group_id(), step[STEP_POS], 0u);
    const float a_h = exp(a_log[h]), bias = dt_bias[h];
    const uint live = chunk_rows(ROWS);   // a padded chunk: its prompt rows; the rest read as zero
    delta_zero_rows(live);
    for (uint t0 = 0; t0 < live; t0 += C) {
        const uint n = min(C, live - t0);
        barrier();  // the previous block's arrays are read
        for (uint e = tid; e < n * DK; e += WG) {
            const uint row = (t0 + e / DK) * CQ, i = e % DK, at = (e / DK) * KS + i;
            qc[at] = qkv[row + hk * DK + i];
            kc[at] = qkv[row + (HK + hk) * DK + i];
        }
        barrier();
        {   // a row's squared norms over its RLN lanes
            const uint r = tid / RLN, l = tid % RLN;
            float sq = 0.0, sk = 0.0;
            if (r < n)
                for (uint i = l; i < DK; i += RLN) {
                    sq += qc[r * KS + i] * qc[r * KS + i];
                    sk += kc[r * KS + i] * kc[r * KS + i];
                }
            part[tid] = sq;
            part[WG + tid] = sk;
        }
        barrier();
        if (tid < n) {   // a row each: its norms, log decay and beta
            float sq = 0.0, sk = 0.0;
            for (uint l = 0; l < RLN; l++) {
                sq += part[tid * RLN + l];
                sk += part[WG + tid * RLN + l];
            }
            nq[tid] = inversesqrt(sq + 1e-6) * inversesqrt(float(DK));
            nk[tid] = inversesqrt(sk + 1e-6);
            const float x = ga[(t0 + tid) * HV + h] + bias;
            gc[tid] = -a_h * (x > 20.0 ? x : log(1.0 + exp(x)));
            bc[tid] = 1.0 / (1.0 + exp(-gb[(t0 + tid) * HV + h]));
        }
        barrier();
        if (tid == 0u) {
            for (uint r = 1; r < n; r++) gc[r] += gc[r - 1];
            for (uint r = 0; r < n; r++) {
                eg[r] = exp(gc[r]);
                ed[r] = exp(gc[n - 1] - gc[r]);
            }
        }
        for (uint e = tid; e < n * DK; e += WG) {
            const uint at = (e / DK) * KS + e % DK;
            qc[at] *= nq[e / DK];
            kc[at] *= nk[e / DK];
        }
        barrier();
        for (uint e = tid; e < n * n; e += WG) {
            const uint t = e / n, i = e % n;
            float kk = 0.0, qk = 0.0;
            if (i <= t)
                for (uint d = 0; d < DK; d++) {
                    kk += kc[t * KS + d] * kc[i * KS + d];
                    qk += qc[t * KS + d] * kc[i * KS + d];
                }
            const float f = i <= t ? exp(gc[t] - gc[i]) : 0.0;   // i > t: unused, and may overflow
            mk[t * C + i] = i < t ? bc[t] * f * kk : 0.0;
            mq[t * C + i] = f * qk;
        }
        for (uint t = p0; t < n; t += P) {   // the right-hand sides, from the state before the block
            float sk = 0.0;
            for (uint i = 0; i < DK; i++) sk += st[i * COLS + jl] * kc[t * KS + i];
            const float v = col ? qkv[(t0 + t) * CQ + 2 * HK * DK + h * DV + j] : 0.0;
            uu[t * COLS + jl] = bc[t] * (v - eg[t] * sk);
        }
        barrier();
        if (p0 == 0u)   // forward substitution, a column's rows in order
            for (uint t = 1; t < n; t++) {
                float u = uu[t * COLS + jl];
                for (uint i = 0; i < t; i++) u -= mk[t * C + i] * uu[i * COLS + jl];
                uu[t * COLS + jl] = u;
            }
        barrier();
        for (uint t = p0; t < n; t += P) {
            float a = 0.0;
            for (uint i = 0; i < DK; i++) a += st[i * COLS + jl] * qc[t * KS + i];
            a *= eg[t];
            for (uint i = 0; i <= t; i++) a += mq[t * C + i] * uu[i * COLS + jl];
            if (col) o[(t0 + t) * HV * DV + h * DV + j] = a;
        }
        barrier();  // the state before the block is read
        const float dl = eg[n - 1];
        for (uint i = p0; i < DK; i += P) {
            float a = st[i * COLS + jl] * dl;
            for (uint t = 0; t < n; t++) a += ed[t] * kc[t * KS + i] * uu[t * COLS + jl];
            st[i * COLS + jl] = a;
        }
    }
    delta_store();
}

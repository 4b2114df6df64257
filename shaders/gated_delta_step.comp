#version 450
#extension GL_GOOGLE_include_directive : require
// gated_delta_step (fusion/ir.py): one token of Qwen3.5's Gated DeltaNet. A workgroup per value
// head h: its q and k head (h / (HV / HK)) l2-normed into shared memory, then each invocation owns
// columns j of the head's state S (DK x DV, row-major, so neighbouring invocations touch
// neighbouring words): decay S by exp(g), kv_j = sum_i S_ij k_i, delta_j = (v_j - kv_j) beta,
// S_ij += k_i delta_j, o_j = sum_i S_ij q_i. The state reads as zero at position 0.
// ROWS > 1: a prompt chunk's rows one after another (the state carried in place from row to row).
// Bindings: 0 qkv, 1 a[HV], 2 b[HV], 3 a_log[HV], 4 dt_bias[HV], 5 step, 6 o[HV DV], 7 s[HV DK DV]
// (per row where a chunk has rows). Spec: 0 wg size, 1 HK, 2 HV, 3 DK, 4 DV, 5 ROWS.
// V_TILED: value head h reads key head h % HK (llama.cpp's GGUF order, V heads tiled over the key
// heads), not h / (HV / HK) (HF's grouped order).
#include "common.glsl"

layout(constant_id = 1) const uint HK = 1;
layout(constant_id = 2) const uint HV = 1;
layout(constant_id = 3) const uint DK = 16;
layout(constant_id = 4) const uint DV = 16;
layout(constant_id = 5) const uint ROWS = 1;  // a prompt chunk's rows, in order (1: a decode step)

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

void main() {
    const uint h = flat_group_id(), tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
#ifdef V_TILED
    const uint hk = h % HK, CQ = 2 * HK * DK + HV * DV;
#else
    const uint hk = h / (HV / HK), CQ = 2 * HK * DK + HV * DV;
#endif
    const uint pos = step[STEP_POS];
    const uint base = h * DK * DV;
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
        const float x = ga[t * HV + h] + dt_bias[h];
        const float decay = exp(-exp(a_log[h]) * (x > 20.0 ? x : log(1.0 + exp(x))));
        const float beta = 1.0 / (1.0 + exp(-gb[t * HV + h]));
        const bool fresh = pos + t == 0u;  // whatever the buffer holds (an earlier sequence) reads as zero
        for (uint j = tid; j < DV; j += WG) {
            float kv = 0.0;
            if (!fresh)
                for (uint i = 0; i < DK; i++) kv += s[base + i * DV + j] * ks[i];
            const float delta = (qkv[t * CQ + 2 * HK * DK + h * DV + j] - kv * decay * nk) * beta;
            float acc = 0.0;
            for (uint i = 0; i < DK; i++) {
                const float v = (fresh ? 0.0 : s[base + i * DV + j] * decay) + ks[i] * nk * delta;
                s[base + i * DV + j] = v;
                acc += v * qs[i];
            }
            o[t * HV * DV + h * DV + j] = acc * nq;
        }
    }
}

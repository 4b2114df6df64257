#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// attention over a prompt chunk on the tensor cores (VK_NV_cooperative_matrix; f16 KV caches,
// causal, no sliding window): each 32-lane subgroup owns 16 chunk rows of one query head,
// o_t = softmax(scale q_t . K[0..pos+t]) V[0..pos+t], pos = step.pos, in steps of NB blocks of 16
// keys: S (16 rows x 16 keys) = Q (16 x D, f16, scale folded in) x K^T (D x 16, read straight
// from the f16 cache as a column-major matrix), one MMA per 16 of D. A step issues the loads of
// all its NB blocks before their MMAs: a subgroup per 16 rows and head is few warps per SM (a
// 512-row Qwen3 chunk: ~4), so memory latency, not tensor work, sets the time; one 16-key block
// per step ran no faster than the f32 kernel.
// Two passes over the keys instead of an online rescale (a cooperative matrix has no per-row
// scaling): pass 1 keeps each row's max m and sum l of exp(s - m) (lanes 0..15, one row each);
// pass 2 recomputes S, writes P = exp(s - m) / l as f16 and accumulates O += P (16 x 16) x V
// (16 x D, row-major from the cache), so O needs no correction and is stored as is.
// Keys past a row's pos + t are masked (later chunk rows, stale rows of rejected drafts). The
// last block of a subgroup may reach past the rows this chunk wrote (and past the cache's end):
// it is staged in shared memory with zeros there, because 0 x NaN of an unwritten row is NaN.
// Bindings: 0 q, 1 k_cache, 2 v_cache, 3 step, 4 o. Spec: 0 wg size (32 x subgroups), 1 H, 2 KVH,
// 3 D (a multiple of 16), 4 T (a multiple of 16 x subgroups), 5 scale (float).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 16;
layout(constant_id = 4) const uint T = 16;
layout(constant_id = 5) const float SCALE = 1.0;

layout(binding = 0) readonly buffer QB { float q[]; };
layout(binding = 1) readonly buffer KB { float16_t kh[]; };
layout(binding = 2) readonly buffer VB { float16_t vh[]; };
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) writeonly buffer OB { float o[]; };

#define CM16 fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define CM32 fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
const uint NSG = gl_WorkGroupSize.x / 32;
const uint NB = 4, BKV = 16 * NB;   // 16-key blocks per step, keys per step
const uint DS = D + 8;         // halves per staged row (16-byte aligned, banks spread)
const uint SS = BKV + 4;       // floats per score row
const uint PS = BKV + 8;       // halves per probability row
shared float16_t qk[NSG * 16 * DS];     // the subgroup's scaled queries, then its last K block
shared float16_t vt[NSG * 16 * DS];     // its last V block
shared float ss[NSG * 16 * SS];
shared float16_t ps[NSG * 16 * PS];
#define SYNC() { subgroupMemoryBarrierShared(); subgroupBarrier(); }

void main() {
    const uint lane = gl_LocalInvocationID.x % 32, sg = gl_LocalInvocationID.x / 32;
    const uint h = gl_WorkGroupID.x, t0 = (gl_WorkGroupID.y * NSG + sg) * 16;
    const uint ROW = KVH * D, kvoff = (h / (H / KVH)) * D;
    const uint pos = step[STEP_POS];
    const uint bq = sg * 16 * DS, bs = sg * 16 * SS, bp = sg * 16 * PS;

    for (uint e = lane; e < 16 * D; e += 32) {
        const uint r = e / D, j = e % D;
        qk[bq + r * DS + j] = float16_t(q[((t0 + r) * H + h) * D + j] * SCALE);
    }
    SYNC();
    CM16 qa[D / 16];
    for (uint i = 0; i < D / 16; i++) coopMatLoadNV(qa[i], qk, bq + 16 * i, DS, false);
    SYNC();                                          // qk is free for the last K block

    const uint n_keys = pos + t0 + 16;               // keys 0 .. the subgroup's last row's position
    const uint nfull = n_keys / 16, nblocks = (n_keys + 15) / 16, nsteps = (nblocks + NB - 1) / NB;
    for (uint e = lane; e < 16 * D; e += 32) {
        const uint r = e / D, j = e % D, key = 16 * nfull + r;
        const bool live = key < n_keys;
        qk[bq + r * DS + j] = live ? kh[key * ROW + kvoff + j] : float16_t(0.0);
        vt[bq + r * DS + j] = live ? vh[key * ROW + kvoff + j] : float16_t(0.0);
    }
    SYNC();

    const uint r = lane % 16, hf = lane / 16;        // softmax: row r, keys hf * BKV / 2 .. of a step
    const uint qp = pos + t0 + r;                    // row r's position: keys 0 .. qp
    float m = NEG_INF, l = 0.0;
    for (uint pass = 0; pass < 2; pass++) {
        CM32 acc[D / 16];
        for (uint i = 0; i < D / 16; i++) acc[i] = CM32(0.0);
        const float inv_l = pass == 1 ? 1.0 / l : 0.0;
        for (uint st = 0; st < nsteps; st++) {
            CM32 s[NB];
            for (uint b = 0; b < NB; b++) s[b] = CM32(0.0);
            for (uint i = 0; i < D / 16; i++)
                for (uint b = 0; b < NB; b++) {
                    const uint blk = st * NB + b;
                    if (blk >= nblocks) continue;            // past the last row: stays 0, masked
                    CM16 kb;
                    if (blk < nfull) coopMatLoadNV(kb, kh, 16 * blk * ROW + kvoff + 16 * i, ROW, true);
                    else coopMatLoadNV(kb, qk, bq + 16 * i, DS, true);
                    s[b] = coopMatMulAddNV(qa[i], kb, s[b]);
                }
            for (uint b = 0; b < NB; b++) coopMatStoreNV(s[b], ss, bs + 16 * b, SS, false);
            SYNC();
            const uint c0 = hf * (BKV / 2), key0 = st * BKV + c0;
            if (pass == 0) {
                float mt = m;
                for (uint c = 0; c < BKV / 2; c++)
                    if (key0 + c <= qp) mt = max(mt, ss[bs + r * SS + c0 + c]);
                mt = max(mt, subgroupShuffleXor(mt, 16));
                float sum = 0.0;
                for (uint c = 0; c < BKV / 2; c++)
                    if (key0 + c <= qp) sum += exp(ss[bs + r * SS + c0 + c] - mt);
                sum += subgroupShuffleXor(sum, 16);
                l = l * exp(m - mt) + sum;           // m = -inf before the first step: exp = 0
                m = mt;
            } else {
                for (uint c = 0; c < BKV / 2; c++)
                    ps[bp + r * PS + c0 + c] = float16_t(key0 + c <= qp ? exp(ss[bs + r * SS + c0 + c] - m) * inv_l : 0.0);
            }
            SYNC();
            if (pass == 1) {
                for (uint b = 0; b < NB; b++) {
                    const uint blk = st * NB + b;
                    if (blk >= nblocks) continue;
                    CM16 pa;
                    coopMatLoadNV(pa, ps, bp + 16 * b, PS, false);
                    for (uint i = 0; i < D / 16; i++) {
                        CM16 vb;
                        if (blk < nfull) coopMatLoadNV(vb, vh, 16 * blk * ROW + kvoff + 16 * i, ROW, false);
                        else coopMatLoadNV(vb, vt, bq + 16 * i, DS, false);
                        acc[i] = coopMatMulAddNV(pa, vb, acc[i]);
                    }
                }
                SYNC();
            }
        }
        if (pass == 1)
            for (uint i = 0; i < D / 16; i++) coopMatStoreNV(acc[i], o, (t0 * H + h) * D + 16 * i, H * D, false);
    }
}

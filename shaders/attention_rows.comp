#version 450
#extension GL_GOOGLE_include_directive : require
// attention over a prompt chunk (GQA, causal): workgroup (h, t) computes row t of head h,
// softmax(scale * q_t,h . K[lo..pos+t]) V[lo..pos+t] over kv head h / (H / KVH), pos = step.pos,
// lo = max(0, pos + t - WINDOW + 1) on a sliding-window layer (WINDOW > 0), else 0.
// One pass with an online softmax over tiles of WG keys, so shared memory does not grow with the
// context: a subgroup per key's score (one invocation per key without subgroup arithmetic), then
// key groups of D / 4 invocations share P . V (vec4s of V rows). Rows past pos + t (later chunk
// rows, stale entries of rejected draft tokens) are never read.
// Bindings: 0 q, 1 k_cache, 2 v_cache, 3 step, 4 o. Spec: 0 wg size (>= D), 1 H, 2 KVH, 3 D,
// 4 T, 5 scale (float), 6 WINDOW (0 = none), 7 SLOT_ROWS. BATCH (fusion/chunk_batch.py): row t is a
// sequence of its own, over rows lo .. pos of its KV slot (pos, slot: its record of the step buffer).
// FUSED (with BATCH; the (QK_NORM_)ROPE_KV_WRITE_ATTENTION_ROWS regions): q is taken before its rope
// (QK_NORM: and its per-head rms norm), and the row's own k and v come in as well. Each workgroup
// builds rope(q_h) and its kv head's current k (normed, roped) and v in shared memory; the first
// q head of each kv group writes them as cache row pos; the tiles read cache rows < pos (written by
// earlier steps) and row pos comes from shared memory, so no workgroup reads what another writes
// (padding rows excepted: they read their slot's rows of this step, whose outputs nobody uses).
// FUSED bindings: 5 k, 6 v, QK_NORM: 7 q_norm_w, 8 k_norm_w; B_FREQ the rope table. Spec 8 eps.
// SINKS (gpt-oss): binding B_SINKS sinks[H], one more logit per head in the softmax's max and
// denominator (no value): the online softmax starts from it, as from a key of score sinks[h] and
// value 0 (m = sinks[h], l = 1), so it counts once and a large sink never overflows an exp.
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 1;
layout(constant_id = 4) const uint T = 1;
layout(constant_id = 5) const float SCALE = 1.0;
layout(constant_id = 6) const uint WINDOW = 0;
layout(constant_id = 7) const uint SLOT_ROWS = 1;

layout(binding = 0) readonly buffer QB { float q[]; };
#define KV_BK 1
#define KV_BV 2
#ifdef FUSED
#ifndef BATCH
#error FUSED is a batched step's kernel
#endif
#define KV_WRITE 1
#endif
#include "kv_cache.glsl"     // f32 or (KV_F16) f16 caches
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) writeonly buffer OB { float o[]; };
#ifdef FUSED
layout(constant_id = 8) const float EPS = 1e-6;
layout(binding = 5) readonly buffer KB { float kin[]; };
layout(binding = 6) readonly buffer VB { float vin[]; };
#ifdef QK_NORM
layout(binding = 7) readonly buffer QNB { float qnw[]; };
layout(binding = 8) readonly buffer KNB { float knw[]; };
#endif
#include "fused_rope.glsl"
shared float kcur[D];   // the row's own k (normed, roped, rounded as the cache stores it) and v
shared float vcur[D];
#endif

#ifdef SINKS
layout(binding = B_SINKS) readonly buffer SinkB { float sinks[]; };
#endif

shared float qs[D];
shared float ps[gl_WorkGroupSize.x];
// KEYS4: the vec4 paths below (D % 4 == 0 and the workgroup a multiple of D / 4 invocations)
// (macros: glslang 12 emits a global bool of specialization constants where it is not defined)
#define D4 (D / 4u + uint(D < 4u))   // never 0, even at the spec constants' defaults
#define KEYS4 (D % 4u == 0u && gl_WorkGroupSize.x % D4 == 0u)
// P . V with KEYS4: invocation tid sums the vec4 c = tid % (D / 4) of keys tid / (D / 4), + KG, ...
// (KG key groups; 32 adjacent invocations read 32 adjacent vec4s of one V row), added up at the end
shared vec4 pv[gl_WorkGroupSize.x];

// scale * q . K[row i] of this workgroup's head (kb: the row's first element)
#ifdef USE_SUBGROUP
// one subgroup per key, its lanes along the row (coalesced), summed with subgroupAdd. H200,
// Qwen3-0.6B F16, 4-row batched steps at position 256: one invocation per key reading its row
// alone took 1.98 ms of attention a step (28 layers) by its per-kernel profile, against 0.61 at
// position 16.
float score_part(uint kb) {   // this lane's part of the dot product
    float s = 0.0;
    if (KEYS4) {
        for (uint c = gl_SubgroupInvocationID; c < D4; c += gl_SubgroupSize)
            s += dot(vec4(qs[4 * c], qs[4 * c + 1], qs[4 * c + 2], qs[4 * c + 3]), KC4(kb / 4 + c));
    } else {
        for (uint j = gl_SubgroupInvocationID; j < D; j += gl_SubgroupSize) s += qs[j] * KC1(kb + j);
    }
    return s;
}
#endif

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint tid = gl_LocalInvocationID.x;
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
    const uint ROW = KVH * D;
    const uint kvoff = (h / (H / KVH)) * D;
    const uint qoff = (t * H + h) * D;
#ifdef BATCH
    const uint len = step[t * STEP_WORDS + STEP_POS] + 1;
    const uint kvbase = step[t * STEP_WORDS + STEP_SLOT] * SLOT_ROWS * ROW + kvoff;
#else
    const uint len = step[STEP_POS] + t + 1;
    const uint kvbase = kvoff;
#endif
    const uint lo = (WINDOW > 0 && len > WINDOW) ? len - WINDOW : 0;
    const uint KG = WG / D4, kg = tid / D4, c = tid % D4;   // used with KEYS4 only

#ifdef FUSED
    const uint pos = len - 1, kin0 = (t * KVH + h / (H / KVH)) * D;
#ifdef QK_NORM
    float sq = 0.0, sk = 0.0;
    for (uint j = tid; j < D; j += WG) {
        const float a = q[qoff + j], b = kin[kin0 + j];
        sq += a * a;
        sk += b * b;
    }
    const float rq = inversesqrt(wg_sum(sq) / float(D) + EPS);
    const float rk = inversesqrt(wg_sum(sk) / float(D) + EPS);
#endif
    for (uint i = tid; i < D / 2; i += WG) {   // one invocation per rope pair
        const vec2 cs = rope_cos_sin(pos, i);
        const uvec2 ab = rope_pair(i);
        float a = q[qoff + ab.x], b = q[qoff + ab.y], e = kin[kin0 + ab.x], f = kin[kin0 + ab.y];
#ifdef QK_NORM
        a *= rq * qnw[ab.x];
        b *= rq * qnw[ab.y];
        e *= rk * knw[ab.x];
        f *= rk * knw[ab.y];
#endif
        qs[ab.x] = (a * cs.x - b * cs.y) * SCALE;
        qs[ab.y] = (a * cs.y + b * cs.x) * SCALE;
        kcur[ab.x] = kv_round(e * cs.x - f * cs.y);
        kcur[ab.y] = kv_round(e * cs.y + f * cs.x);
    }
    for (uint j = tid; j < D; j += WG) vcur[j] = kv_round(vin[kin0 + j]);
    barrier();
    if (h % (H / KVH) == 0)   // the kv group's writer: whole f16 words from shared memory
        for (uint j = tid; j < D / 2; j += WG) {
            KC_PUT2(pos * ROW + kvbase + 2 * j, kcur[2 * j], kcur[2 * j + 1]);
            VC_PUT2(pos * ROW + kvbase + 2 * j, vcur[2 * j], vcur[2 * j + 1]);
        }
    const uint kend = pos;   // the tiles take cache rows lo .. pos - 1; row pos comes last
#else
    for (uint j = tid; j < D; j += WG) qs[j] = q[qoff + j] * SCALE;
    barrier();
    const uint kend = len;
#endif
    float m = NEG_INF, l = 0.0, acc = 0.0;
#ifdef SINKS
    m = sinks[h];
    l = 1.0;
#endif
    vec4 acc4 = vec4(0.0);
    for (uint base = lo; base < kend; base += WG) {
        const uint n = min(WG, kend - base);
#ifdef USE_SUBGROUP
        // four keys a pass, one vec4 subgroupAdd: their loads and reductions overlap (a key at a
        // time, each subgroup's keys were a chain of dependent loads and shuffles)
        const uint NS = gl_NumSubgroups;
        uint k = gl_SubgroupID;
        for (; k + 3 * NS < n; k += 4 * NS) {
            const uint kb = (base + k) * ROW + kvbase, st = NS * ROW;
            const vec4 s4 = subgroupAdd(
                vec4(score_part(kb), score_part(kb + st), score_part(kb + 2 * st), score_part(kb + 3 * st))
            );
            if (subgroupElect()) {
                ps[k] = s4.x;
                ps[k + NS] = s4.y;
                ps[k + 2 * NS] = s4.z;
                ps[k + 3 * NS] = s4.w;
            }
        }
        for (; k < n; k += NS) {
            const float sk = subgroupAdd(score_part((base + k) * ROW + kvbase));
            if (subgroupElect()) ps[k] = sk;
        }
        barrier();
        const float s = tid < n ? ps[tid] : NEG_INF;
#else
        uint i = base + tid;
        float s = NEG_INF;
        if (i < kend) {
            s = 0.0;
            uint kb = i * ROW + kvbase;
            for (uint j = 0; j < D; j++) s += qs[j] * KC1(kb + j);
        }
#endif
        float mn = max(m, wg_max(s));
        float p = tid < n ? exp(s - mn) : 0.0;
        ps[tid] = p;
        float corr = exp(m - mn);   // 0 on the first tile (m = -inf)
        l = l * corr + wg_sum(p);
        barrier();                  // every ps entry is visible (wg_sum may skip its barriers)
        if (KEYS4) {
            vec4 a = vec4(0.0);
            const uint vb = ((base + kg) * ROW + kvbase) / 4 + c, vs = KG * ROW / 4;
            uint r = kg, i = vb;
            for (; r + 3 * KG < n; r += 4 * KG, i += 4 * vs) {   // four V loads in flight
                const vec4 v0 = VC4(i), v1 = VC4(i + vs), v2 = VC4(i + 2 * vs), v3 = VC4(i + 3 * vs);
                a += ps[r] * v0 + ps[r + KG] * v1 + ps[r + 2 * KG] * v2 + ps[r + 3 * KG] * v3;
            }
            for (; r < n; r += KG, i += vs) a += ps[r] * VC4(i);
            acc4 = acc4 * corr + a;
        } else if (tid < D) {
            float a = 0.0;
            for (uint r = 0; r < n; r++) a += ps[r] * VC1((base + r) * ROW + kvbase + tid);
            acc = acc * corr + a;
        }
        m = mn;
        barrier();                  // ps is rewritten by the next tile
    }
#ifdef FUSED
    {   // row pos, from shared memory (FUSED: D is even, and a multiple of 4 with KEYS4)
        float sp = 0.0;
        for (uint j = tid; j < D; j += WG) sp += qs[j] * kcur[j];
        const float s = wg_sum(sp);
        const float mn = max(m, s), corr = exp(m - mn), p = exp(s - mn);
        l = l * corr + p;
        if (KEYS4)
            acc4 = acc4 * corr + (kg == 0 ? p * vec4(vcur[4 * c], vcur[4 * c + 1], vcur[4 * c + 2], vcur[4 * c + 3]) : vec4(0.0));
        else if (tid < D)
            acc = acc * corr + p * vcur[tid];
        m = mn;
    }
#endif
    if (KEYS4) {
        pv[tid] = acc4;
        barrier();
        if (tid < D4) {
            vec4 sum = vec4(0.0);
            for (uint g = 0; g < KG; g++) sum += pv[g * D4 + tid];
            for (uint e = 0; e < 4; e++) o[qoff + 4 * tid + e] = sum[e] / l;
        }
    } else if (tid < D) {
        o[qoff + tid] = acc / l;
    }
}

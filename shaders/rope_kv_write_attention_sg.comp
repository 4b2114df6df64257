#version 450
#extension GL_GOOGLE_include_directive : require
// (QK_NORM_)ROPE_KV_WRITE_ATTENTION, subgroup-rows form: the same grid, bindings and results as
// rope_kv_write_attention.comp (workgroup (s, h) takes rows [s*c, min(len, (s+1)*c)), c =
// ceil(len / L), len = pos + 1, L = attn_live_splits(pos) splits with rows, the others return;
// SPLIT writes attn_partials.glsl's partials), built for latency:
//   - each subgroup owns whole rows (rows sg, sg + NSG, ...) and each lane EPL = D / LANES
//     contiguous elements of a row, so a score is one subgroupAdd and no workgroup barrier;
//   - every lane rotates (and with QK_NORM rms-normalises) its own q and k elements straight from
//     the inputs, loading each pair partner itself: no shared q, no barrier after the RoPE;
//   - rows go in batches of RB: the K and V cache rows of a batch are loaded before any is used,
//     so a batch costs one memory round trip, and each subgroup keeps an online softmax (m, l, o);
//   - two barriers at the end merge the subgroups' (m, l, o) in shared memory.
// The writer workgroup (0, first q head of the kv group) stores the current k, v as cache row pos;
// attention reads cache rows < pos (written by earlier steps) and takes row pos from registers.
// Needs subgroup arithmetic and a fixed subgroup size of LANES (fused_attention.py checks).
// Bindings: 0 q, 1 k, 2 v, 3 step, 4 k_cache, 5 v_cache (f32, or f16 with KV_F16: kv_cache.glsl),
//   6 o (or partials),
//   QK_NORM: 7 q_norm_w[D], 8 k_norm_w[D].
// Spec: 0 wg size, 1 H, 2 KVH, 3 D, 4 S, 5 MAXCHUNK, 6 scale, 7 (unused), 8 eps (QK_NORM),
// 9 WINDOW (0: all rows), 10 MIN_S (live splits at least: attn_partials.glsl's attn_live_splits;
// workgroups s >= the live count return at once). Define B_FREQ: the binding of the rope inverse-frequency table.
// SINKS (gpt-oss): binding B_SINKS sinks[H], one more logit per head in the softmax's max and
// denominator (no value), taken by split 0 alone into its merged (m, l), as attention.comp does.
// Defines: LANES (subgroup size), EPL (D / LANES), RB (rows per batch), NEOX, QK_NORM, SPLIT,
#define NO_WG_REDUCE
#include "common.glsl"
#include "attn_partials.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 2;
layout(constant_id = 4) const uint S = 1;
layout(constant_id = 5) const uint MAXCHUNK = 1;
// rows per live split in attn_live_splits (fused_attention.live_rows): MAXCHUNK, or fewer on GPUs so
// a long context's mid positions keep splits of about the tuned short-context size
#ifndef LIVE_ROWS
#define LIVE_ROWS MAXCHUNK
#endif
layout(constant_id = 6) const float SCALE = 1.0;
layout(constant_id = 8) const float EPS = 1e-6;
layout(constant_id = 9) const uint WINDOW = 0;   // keys a sliding-window layer sees (0: all)
layout(constant_id = 10) const uint MIN_S = 1;
const uint NSG = gl_WorkGroupSize.x / LANES;
const uint ROW = KVH * D;   // elements of one cache row (all kv heads)

layout(binding = 0) readonly buffer QB { float q[]; };
layout(binding = 1) readonly buffer KB { float k[]; };
layout(binding = 2) readonly buffer VB { float v[]; };
layout(binding = 3) readonly buffer StepB { uint step[]; };
#define KV_BK 4
#define KV_BV 5
#define KV_WRITE 1
#include "kv_cache.glsl"
layout(binding = 6) writeonly buffer OB { float o[]; };
#ifdef QK_NORM
layout(binding = 7) readonly buffer QNB { float qnw[]; };
layout(binding = 8) readonly buffer KNB { float knw[]; };
#endif
// EPL % 4 == 0: 16-byte (f16: 8-byte) cache loads, a lane's EPL elements being contiguous and
// starting at a multiple of 4. KV_F16 needs an even EPL (fused_attention.py checks): a lane writes
// whole words of the current row.

#include "fused_rope.glsl"
#ifdef SINKS
layout(binding = B_SINKS) readonly buffer SinkB { float sinks[]; };
#endif

shared float sg_ml[2 * NSG];
shared float sg_o[NSG * D];
shared float sg_w[NSG];
shared float sg_mx;

// Partner of element e in its RoPE pair, and the sign its term takes: e' = e * c + sign * p * s.
uint rope_partner(uint e) {
#ifdef NEOX
    return e < D / 2 ? e + D / 2 : e - D / 2;
#else
    return e ^ 1u;
#endif
}
float rope_sign(uint e) {
#ifdef NEOX
    return e < D / 2 ? -1.0 : 1.0;
#else
    return (e & 1u) == 0u ? -1.0 : 1.0;
#endif
}
uint rope_index(uint e) {  // pair index i of rope_cos_sin
#ifdef NEOX
    return e % (D / 2);
#else
    return e / 2;
#endif
}

// The lane's EPL elements of one K and one V cache row, from word `base` (row, kv head, lane).
void load_row(uint base, out float kr[EPL], out float vr[EPL]) {
#if EPL % 4 == 0
    for (uint u = 0; u < EPL / 4; u++) {
        const vec4 a = KC4(base / 4 + u), b = VC4(base / 4 + u);
        for (uint c = 0; c < 4; c++) {
            kr[4 * u + c] = a[c];
            vr[4 * u + c] = b[c];
        }
    }
#else
    for (uint c = 0; c < EPL; c++) {
        kr[c] = KC1(base + c);
        vr[c] = VC1(base + c);
    }
#endif
}

// The batch of rows i0, i0 + NSG, ... (RB of them) from the caches: rows i < nc only (row nc, when
// it is pos, comes from registers: the caller fills it in).
void load_batch(uint i0, uint r0, uint nc, uint off, out float kr[RB][EPL], out float vr[RB][EPL]) {
    for (uint r = 0; r < RB; r++) {
        const uint i = i0 + r * NSG;
        if (i < nc) {
            load_row((r0 + i) * ROW + off, kr[r], vr[r]);
        } else {
            for (uint c = 0; c < EPL; c++) {
                kr[r][c] = 0.0;
                vr[r][c] = 0.0;
            }
        }
    }
}

void main() {
    const uint t = gl_LocalInvocationID.x;
    const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
    const uint s = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    const uint kvh = h / (H / KVH), kvoff = kvh * D;
    const uint e0 = lane * EPL;   // this lane's first element of the head

    // This workgroup's rows [r0, r0 + n) (nc of them from the caches; row pos, when it is the last,
    // from registers) follow from the step word alone, so the first batch of cache rows is loaded
    // right after it: before the RoPE and the writer's stores (rows < pos, never the row written),
    // which the loads would otherwise wait behind, the compiler keeping them in program order.
    float kr[RB][EPL], vr[RB][EPL];
    uint r0, n, nc;
#define ATTN_ROWS_AND_FIRST_BATCH() { \
        const uint len_ = pos + 1; \
        const uint lo_ = window_start(len_, WINDOW); \
        const uint chunk_ = (len_ - lo_ + live - 1) / live;   /* <= MAXCHUNK */ \
        r0 = lo_ + min(s * chunk_, len_ - lo_); \
        n = min(len_ - r0, chunk_); \
        nc = (n > 0 && r0 + n == len_) ? n - 1 : n; \
        load_batch(sg, r0, nc, kvoff + e0, kr, vr); \
    }
    // q, k (rotated, normed with QK_NORM) and v of the current token: the lane's elements, and the
    // RoPE table entries (they do not depend on the position: loaded with q, k and v)
    float qr[EPL], kcur[EPL], vcur[EPL];
    float qa[EPL], qb[EPL], ka[EPL], kb[EPL];   // own and partner values
    float fq[EPL];
    for (uint c = 0; c < EPL; c++) {
        const uint e = e0 + c, p = rope_partner(e);
        qa[c] = q[h * D + e];
        qb[c] = q[h * D + p];
        ka[c] = k[kvoff + e];
        kb[c] = k[kvoff + p];
        vcur[c] = kv_round(v[kvoff + e]);
        fq[c] = freqs[rope_index(e)];
    }
    // after the loads above, so a live workgroup waits for them and the step word together
    const uint pos = step[STEP_POS];
    const uint live = attn_live_splits(pos, WINDOW, S, LIVE_ROWS, MIN_S);
    if (s >= live) return;   // no rows at this position (never the writer, s = 0); uniform
    ATTN_ROWS_AND_FIRST_BATCH()
#ifdef QK_NORM
    float sq = 0.0, sk = 0.0;
    for (uint c = 0; c < EPL; c++) {
        sq += qa[c] * qa[c];
        sk += ka[c] * ka[c];
    }
    const float rq = inversesqrt(subgroupAdd(sq) / float(D) + EPS);
    const float rk = inversesqrt(subgroupAdd(sk) / float(D) + EPS);
    for (uint c = 0; c < EPL; c++) {
        const uint e = e0 + c, p = rope_partner(e);
        qa[c] *= rq * qnw[e];
        qb[c] *= rq * qnw[p];
        ka[c] *= rk * knw[e];
        kb[c] *= rk * knw[p];
    }
#endif
    for (uint c = 0; c < EPL; c++) {
        const uint e = e0 + c;
        const vec2 cs = rope_angle_cs(pos, fq[c]);
        const float sgn = rope_sign(e);
        qr[c] = (qa[c] * cs.x + sgn * qb[c] * cs.y) * SCALE;
        kcur[c] = kv_round(ka[c] * cs.x + sgn * kb[c] * cs.y);
    }
    const bool writer = s == 0 && h % (H / KVH) == 0 && sg == 0;
    if (writer) {  // the very values attention takes from registers for row pos
#ifdef KV_F16
        for (uint c = 0; c < EPL; c += 2) {
            KC_PUT2(pos * ROW + kvoff + e0 + c, kcur[c], kcur[c + 1]);
            VC_PUT2(pos * ROW + kvoff + e0 + c, vcur[c], vcur[c + 1]);
        }
#else
        for (uint c = 0; c < EPL; c++) {
            kc[pos * ROW + kvoff + e0 + c] = kcur[c];
            vc[pos * ROW + kvoff + e0 + c] = vcur[c];
        }
#endif
    }

    float m = NEG_INF, l = 0.0, acc[EPL];
    for (uint c = 0; c < EPL; c++) acc[c] = 0.0;
    for (uint i0 = sg; i0 < n; i0 += NSG * RB) {   // uniform over the subgroup
        float sc[RB];
        if (i0 != sg) load_batch(i0, r0, nc, kvoff + e0, kr, vr);   // the first was loaded early
        for (uint r = 0; r < RB; r++) {
            if (i0 + r * NSG >= nc) {   // row pos (or past n: unused)
                kr[r] = kcur;
                vr[r] = vcur;
            }
        }
        float bm = NEG_INF;
        for (uint r = 0; r < RB; r++) {
            float d = 0.0;
            for (uint c = 0; c < EPL; c++) d += qr[c] * kr[r][c];
            sc[r] = subgroupAdd(d);
            if (i0 + r * NSG < n) bm = max(bm, sc[r]);
        }
        const float mn = max(m, bm);                 // finite: row i0 < n is in the batch
        const float keep = m == NEG_INF ? 0.0 : exp(m - mn);
        l *= keep;
        for (uint c = 0; c < EPL; c++) acc[c] *= keep;
        for (uint r = 0; r < RB; r++) {
            if (i0 + r * NSG < n) {
                const float p = exp(sc[r] - mn);
                l += p;
                for (uint c = 0; c < EPL; c++) acc[c] += p * vr[r][c];
            }
        }
        m = mn;
    }

    // merge the subgroups: o = sum_g w_g o_g, l = sum_g w_g l_g, w_g = e^(m_g - M) (0: no rows)
    if (lane == 0) {
        sg_ml[2 * sg] = m;
        sg_ml[2 * sg + 1] = l;
    }
    for (uint c = 0; c < EPL; c++) sg_o[sg * D + e0 + c] = acc[c];
    barrier();
    if (t < NSG) {
        float mx = NEG_INF;
        for (uint g = 0; g < NSG; g++)
            if (sg_ml[2 * g + 1] > 0.0) mx = max(mx, sg_ml[2 * g]);
#ifdef SINKS
        if (s == 0u) mx = max(mx, sinks[h]);   // a large sink must not overflow the exps
#endif
        sg_w[t] = sg_ml[2 * t + 1] > 0.0 ? exp(sg_ml[2 * t] - mx) : 0.0;
        if (t == 0) sg_mx = mx;
    }
    barrier();
    float lt = 0.0;
    for (uint g = 0; g < NSG; g++) lt += sg_w[g] * sg_ml[2 * g + 1];
#ifdef SINKS
    if (s == 0u) lt += exp(sinks[h] - sg_mx);
#endif
    for (uint j = t; j < D; j += gl_WorkGroupSize.x) {
        float a = 0.0;
        for (uint g = 0; g < NSG; g++) a += sg_w[g] * sg_o[g * D + j];
#ifdef SPLIT
        // one live split: the final o (as without SPLIT) with l = 1, so a combine passes it through
        o[PART_O(s, h, j, H, D)] = live == 1u ? a / lt : a;
        if (j == 0) {
            o[PART_ML(s, h, H, D, S)] = sg_mx;
            o[PART_ML(s, h, H, D, S) + 1] = live == 1u ? 1.0 : lt;  // 0 for an empty chunk: the combine skips it
        }
#else
        o[h * D + j] = a / lt;
#endif
    }
}

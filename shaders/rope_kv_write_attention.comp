#version 450
#extension GL_GOOGLE_include_directive : require
// (QK_NORM_)ROPE_KV_WRITE_ATTENTION in one dispatch on attention.comp's fixed split-K grid
// (workgroup (s, h): rows [s*c, min(len, (s+1)*c)), c = ceil(len / L), len = pos + 1, for the
// L = attn_live_splits(pos) splits with rows; the others return at once):
//   every workgroup builds rope(q_h) (QK_NORM: of the per-head rms-normed q_h) and its kv head's
//   current k (normed, roped) and v in shared memory itself; the workgroup (0, first q head of the
//   kv group) writes that k, v as row pos of the caches; attention reads cache rows < pos, written
//   by earlier steps, and takes row pos from its own shared copy. No workgroup reads what another
//   writes in this dispatch, so no barrier and no race. SPLIT writes attn_partials.glsl's partials
//   (combined by the o-projection as it loads them, or by attention_combine); without it (S == 1) o.
// Latency, not bandwidth, bounds decode attention (a few rows per workgroup), so the scores use
// TPR invocations per row (chosen from the row count: enough rows in flight for all of them, one
// pass), and P.V splits the rows over WG / D row groups; no invocation walks a long chain of loads.
// Bindings: 0 q, 1 k, 2 v, 3 step, 4 k_cache, 5 v_cache (f32, or f16 with KV_F16: kv_cache.glsl),
//   6 o (or partials),
//   QK_NORM: 7 q_norm_w[D], 8 k_norm_w[D].
// Spec: 0 wg size, 1 H, 2 KVH, 3 D, 4 S, 5 MAXCHUNK, 6 scale, 7 (unused), 8 eps (QK_NORM),
// 9 WINDOW (0: all rows), 10 MIN_S (live splits at least: attn_partials.glsl's attn_live_splits;
// workgroups s >= the live count return at once). Define B_FREQ: the binding of the rope inverse-frequency table.
// SINKS (gpt-oss): binding B_SINKS sinks[H], one more logit per head in the softmax's max and
// denominator (no value), taken by split 0 alone into its (m, l), as attention.comp does.
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
#ifdef KVEC
#define DU (D / 4)
#else
#define DU D
#endif
// P.V row groups: each invocation of a group owns one unit (vec4 with KVEC) of columns, and the
// groups split the rows, so no invocation walks more than n / RG rows.
const uint RG = gl_WorkGroupSize.x >= DU ? gl_WorkGroupSize.x / DU : 1;

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

#include "fused_rope.glsl"
#ifdef SINKS
layout(binding = B_SINKS) readonly buffer SinkB { float sinks[]; };
#endif

shared float qs[D];
shared float ks[D];
shared float vs[D];
shared float sc[MAXCHUNK];
shared float part[RG * D];

shared float red[gl_WorkGroupSize.x];

// Unit u (a vec4 with KVEC, else one float) of q . k for a cache row at word base, or, when
// current, for the k in shared memory.
float unit_score(uint base, uint u, bool current) {
#ifdef KVEC
    vec4 kv = current ? vec4(ks[4 * u], ks[4 * u + 1], ks[4 * u + 2], ks[4 * u + 3]) : KC4(base / 4 + u);
    return dot(vec4(qs[4 * u], qs[4 * u + 1], qs[4 * u + 2], qs[4 * u + 3]), kv);
#else
    return qs[u] * (current ? ks[u] : KC1(base + u));
#endif
}

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint t = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    const uint ROW = KVH * D;
    const uint kvh = h / (H / KVH), kvoff = kvh * D;
    const uint pos = step[STEP_POS];
    const uint live = attn_live_splits(pos, WINDOW, S, LIVE_ROWS, MIN_S);
    if (s >= live) return;   // no rows at this position (never the writer, s = 0); uniform
    const uint len = pos + 1;
    const uint lo = window_start(len, WINDOW);
    const uint chunk = (len - lo + live - 1) / live;   // <= MAXCHUNK
    const uint r0 = lo + min(s * chunk, len - lo);
    const uint n = min(len - r0, chunk);
    const bool cur = n > 0 && r0 + n == len;  // this split ends with row pos: from shared memory
    const uint nc = cur ? n - 1 : n;           // rows read from the caches

    // q_h, k and v of the current token (per-head rms norm first with QK_NORM)
#ifdef QK_NORM
    float sq = 0.0, sk = 0.0;
    for (uint j = t; j < D; j += WG) {
        float a = q[h * D + j], b = k[kvoff + j];
        sq += a * a;
        sk += b * b;
    }
    const float rq = inversesqrt(wg_sum(sq) / float(D) + EPS);
    const float rk = inversesqrt(wg_sum(sk) / float(D) + EPS);
#endif
    // one invocation per pair: normed (QK_NORM) and rotated straight from global memory into
    // shared memory, and, by the writer workgroup, into the caches (one barrier in all)
    const bool writer = s == 0 && h % (H / KVH) == 0;
    const uint crow = pos * ROW + kvoff;
    for (uint i = t; i < D / 2; i += WG) {
        const vec2 cs = rope_cos_sin(pos, i);
        const uvec2 ab = rope_pair(i);
        float a = q[h * D + ab.x], b = q[h * D + ab.y];
        float c = k[kvoff + ab.x], e = k[kvoff + ab.y];
#ifdef QK_NORM
        a = a * rq * qnw[ab.x];
        b = b * rq * qnw[ab.y];
        c = c * rk * knw[ab.x];
        e = e * rk * knw[ab.y];
#endif
        qs[ab.x] = (a * cs.x - b * cs.y) * SCALE;
        qs[ab.y] = (a * cs.y + b * cs.x) * SCALE;
        const float kx = kv_round(c * cs.x - e * cs.y), ky = kv_round(c * cs.y + e * cs.x);
        ks[ab.x] = kx;
        ks[ab.y] = ky;
#ifndef KV_F16
        if (writer) {  // the very values attention takes from shared memory for row pos
            kc[crow + ab.x] = kx;
            kc[crow + ab.y] = ky;
        }
#endif
    }
    for (uint j = t; j < D; j += WG) {
        const float vv = kv_round(v[kvoff + j]);
        vs[j] = vv;
#ifndef KV_F16
        if (writer) vc[crow + j] = vv;
#endif
    }
    barrier();
#ifdef KV_F16
    // an f16 word holds elements 2j, 2j+1, which a NEOX pair does not: write from shared memory
    if (writer)
        for (uint j = t; j < D / 2; j += WG) {
            KC_PUT2(crow + 2 * j, ks[2 * j], ks[2 * j + 1]);
            VC_PUT2(crow + 2 * j, vs[2 * j], vs[2 * j + 1]);
        }
#endif

    // scores: TPR invocations per row (a power of two, up to DU), each summing every TPR-th unit,
    // then a shared-memory tree over the TPR partials; uniform over the workgroup
    uint tpr = 1;
    while (tpr < DU && tpr * 2 * n <= WG) tpr *= 2;
    const uint rpp = WG / tpr, lane = t % tpr;
    float m = NEG_INF;
    for (uint i0 = 0; i0 < n; i0 += rpp) {
        const uint i = i0 + t / tpr;
        float a = 0.0;
        if (i < n)
            for (uint u = lane; u < DU; u += tpr) a += unit_score((r0 + i) * ROW + kvoff, u, i >= nc);
        if (tpr > 1) {
            red[t] = a;
            barrier();
            for (uint hh = tpr / 2; hh > 0; hh >>= 1) {
                if (lane < hh) red[t] += red[t + hh];
                barrier();
            }
            a = red[t];  // only lane 0's is the row's score; each invocation reads its own slot
        }
        if (lane == 0 && i < n) {
            sc[i] = a;
            m = max(m, a);
        }
    }
    m = wg_max(m);  // barrier inside: all scores are visible after it
#ifdef SINKS
    if (s == 0u) m = max(m, sinks[h]);   // uniform; a large sink must not overflow exp below
#endif
    float l = 0.0;
    for (uint i = t; i < n; i += WG) {
        float p = exp(sc[i] - m);
        sc[i] = p;
        l += p;
    }
    l = wg_sum(l);
#ifdef SINKS
    if (s == 0u) l += exp(sinks[h] - m);
#endif

    for (uint idx = t; idx < RG * DU; idx += WG) {
        uint c = idx % DU, g = idx / DU;
#ifdef KVEC
        vec4 acc = vec4(0.0);
        for (uint i = g; i < nc; i += RG) acc += sc[i] * VC4(((r0 + i) * ROW + kvoff) / 4 + c);
        if (cur && g == nc % RG) acc += sc[nc] * vec4(vs[4 * c], vs[4 * c + 1], vs[4 * c + 2], vs[4 * c + 3]);
        for (uint e = 0; e < 4; e++) part[g * D + 4 * c + e] = acc[e];
#else
        float acc = 0.0;
        for (uint i = g; i < nc; i += RG) acc += sc[i] * VC1((r0 + i) * ROW + kvoff + c);
        if (cur && g == nc % RG) acc += sc[nc] * vs[c];
        part[g * D + c] = acc;
#endif
    }
    barrier();
    for (uint j = t; j < D; j += WG) {
        float acc = 0.0;
        for (uint g = 0; g < RG; g++) acc += part[g * D + j];
#ifdef SPLIT
        // one live split: the final o (as without SPLIT) with l = 1, so a combine passes it through
        o[PART_O(s, h, j, H, D)] = live == 1u ? acc / l : acc;
        if (j == 0) {
            o[PART_ML(s, h, H, D, S)] = m;
            o[PART_ML(s, h, H, D, S) + 1] = live == 1u ? 1.0 : l;  // 0 for an empty chunk: the combine skips it
        }
#else
        o[h * D + j] = acc / l;
#endif
    }
}

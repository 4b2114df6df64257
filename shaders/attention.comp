#version 450
#extension GL_GOOGLE_include_directive : require
// attention (decode, GQA): o_h = softmax(scale * q_h . K[0..pos]) V[0..pos] over kv head
// h / (H / KVH), pos read from the step buffer. Split-K with a grid fixed at build time: of its S
// splits, the first L = attn_live_splits(pos) take rows (workgroup (s, h): [s*c, min(len, (s+1)*c))
// with c = ceil(len / L), len = pos + 1) and the others return at once, so the recording never
// depends on the token and the work grows with pos, not with S. With SPLIT defined it writes
// (unnormalised o, max, sum) partials for attention_combine; without it (S == 1) it writes o.
// Bindings: 0 q, 1 k_cache, 2 v_cache (f32, or f16 with KV_F16: kv_cache.glsl), 3 step, 4 o (or
// partials, attn_partials.glsl).
// Spec: 0 wg size, 1 H, 2 KVH, 3 D, 4 S, 5 MAXCHUNK (= ceil(rows / S)), 6 scale (float),
// 7 WINDOW (0: all rows; else rows [len - WINDOW, len), common.glsl's window_start), 8 MIN_S (live
// splits at least, attn_partials.glsl).
// SINKS (gpt-oss): binding 5 sinks[H], one more logit per head in the softmax's max and denominator
// (no value). Split 0 alone takes it into its (m, l): every combine sums the splits' l, so it counts
// once, and the partials keep their layout (attention_combine and an o-projection's COMBINE_X, and
// the one-live-split shortcut, need no change).
#include "common.glsl"
#include "attn_partials.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 1;
layout(constant_id = 4) const uint S = 1;
layout(constant_id = 5) const uint MAXCHUNK = 1;
layout(constant_id = 6) const float SCALE = 1.0;
layout(constant_id = 7) const uint WINDOW = 0;   // keys a sliding-window layer sees (0: all)
layout(constant_id = 8) const uint MIN_S = 1;
// Row groups of the P.V phase: with more invocations than D, each row group sums a slice of rows.
const uint RG = gl_WorkGroupSize.x >= D ? gl_WorkGroupSize.x / D : 1;

layout(binding = 0) readonly buffer QB { float q[]; };
#define KV_BK 1
#define KV_BV 2
#include "kv_cache.glsl"
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) writeonly buffer OB { float o[]; };
#ifdef SINKS
layout(binding = 5) readonly buffer SinkB { float sinks[]; };
#endif

shared float qs[D];
shared float sc[MAXCHUNK];
shared float part[RG * D];

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint t = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    const uint ROW = KVH * D;
    const uint kvoff = (h / (H / KVH)) * D;
    const uint pos = step[STEP_POS];
    const uint live = attn_live_splits(pos, WINDOW, S, MAXCHUNK, MIN_S);
    if (s >= live) return;   // uniform over the workgroup: no barrier is skipped
    uint len = pos + 1;
    uint lo = window_start(len, WINDOW);
    uint chunk = (len - lo + live - 1) / live;   // <= MAXCHUNK: live >= rows / MAXCHUNK
    uint r0 = lo + min(s * chunk, len - lo);
    uint n = min(len - r0, chunk);

    for (uint j = t; j < D; j += WG) qs[j] = q[h * D + j] * SCALE;
    barrier();

    float m = NEG_INF;
    for (uint i = t; i < n; i += WG) {
        uint base = (r0 + i) * ROW + kvoff;
        float a = 0.0;
#ifdef KVEC
        for (uint j = 0; j < D; j += 4)
            a += dot(vec4(qs[j], qs[j + 1], qs[j + 2], qs[j + 3]), KC4((base + j) / 4));
#else
        for (uint j = 0; j < D; j++) a += qs[j] * KC1(base + j);
#endif
        sc[i] = a;
        m = max(m, a);
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

    for (uint idx = t; idx < RG * D; idx += WG) {
        uint j = idx % D, g = idx / D;
        float acc = 0.0;
        for (uint i = g; i < n; i += RG) acc += sc[i] * VC1((r0 + i) * ROW + kvoff + j);
        part[idx] = acc;
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

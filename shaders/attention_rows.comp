#version 450
#extension GL_GOOGLE_include_directive : require
// attention over a prompt chunk (GQA, causal): workgroup (h, t) computes row t of head h,
// softmax(scale * q_t,h . K[lo..pos+t]) V[lo..pos+t] over kv head h / (H / KVH), pos = step.pos,
// lo = max(0, pos + t - WINDOW + 1) on a sliding-window layer (WINDOW > 0), else 0.
// One pass with an online softmax over tiles of WG keys (one key per invocation), so shared
// memory does not grow with the context. Rows past pos + t (later chunk rows, stale entries of
// rejected draft tokens) are never read.
// Bindings: 0 q, 1 k_cache, 2 v_cache, 3 step, 4 o. Spec: 0 wg size (>= D), 1 H, 2 KVH, 3 D,
// 4 T, 5 scale (float), 6 WINDOW (0 = none), 7 SLOT_ROWS. BATCH (fusion/chunk_batch.py): row t is a
// sequence of its own, over rows lo .. pos of its KV slot (pos, slot: its record of the step buffer).
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
#include "kv_cache.glsl"     // f32 or (KV_F16) f16 caches
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) writeonly buffer OB { float o[]; };

shared float qs[D];
shared float ps[gl_WorkGroupSize.x];

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

    for (uint j = tid; j < D; j += WG) qs[j] = q[qoff + j] * SCALE;
    barrier();
    float m = NEG_INF, l = 0.0, acc = 0.0;
    for (uint base = lo; base < len; base += WG) {
        uint i = base + tid;
        float s = NEG_INF;
        if (i < len) {
            s = 0.0;
            uint kb = i * ROW + kvbase;
            for (uint j = 0; j < D; j++) s += qs[j] * KC1(kb + j);
        }
        float mn = max(m, wg_max(s));
        float p = i < len ? exp(s - mn) : 0.0;
        ps[tid] = p;
        float corr = exp(m - mn);   // 0 on the first tile (m = -inf)
        l = l * corr + wg_sum(p);
        barrier();                  // every ps entry is visible (wg_sum may skip its barriers)
        if (tid < D) {
            float a = 0.0;
            uint n = min(WG, len - base);
            for (uint r = 0; r < n; r++) a += ps[r] * VC1((base + r) * ROW + kvbase + tid);
            acc = acc * corr + a;
        }
        m = mn;
        barrier();                  // ps is rewritten by the next tile
    }
    if (tid < D) o[qoff + tid] = acc / l;
}

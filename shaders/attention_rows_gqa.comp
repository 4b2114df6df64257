#version 450
#extension GL_GOOGLE_include_directive : require
// attention over a prompt chunk (GQA, causal), a kv head at a time: workgroup (g, b) computes rows
// t0 = b BQ .. t0 + BQ - 1 of the G = H / KVH query heads of kv head g (QG = BQ G query vectors),
// softmax(scale * q_t,h . K[lo..pos+t]) V[lo..pos+t], pos = step.pos, lo = max(0, pos + t - WINDOW + 1)
// on a sliding-window layer (WINDOW > 0), else 0. Per tile of BKV keys the K rows, then the V rows,
// are loaded once into shared memory (contiguous reads) and used by all QG query vectors; in
// attention_rows.comp every (head, row) workgroup read its own copy, each invocation walking one
// key row, so a warp touched 32 rows per load. Online softmax (one invocation per query vector),
// so shared memory does not grow with the context. Keys past a row's pos + t are masked, never
// used (later chunk rows, stale entries of rejected draft tokens).
// Bindings: 0 q, 1 k_cache, 2 v_cache, 3 step, 4 o. Spec: 0 wg size (a multiple of BKV dividing QG BKV), 1 H, 2 KVH, 3 D, 4 T,
// 5 scale (float), 6 WINDOW (0 = none), 7 BQ (chunk rows per workgroup), 8 BKV (keys per tile).
// SINKS (gpt-oss): binding 5 sinks[H], one more logit per head in the softmax's max and denominator
// (no value): each query vector's online softmax starts from it, as from a key of score sinks[h]
// and value 0 (m = sinks[h], l = 1), so it counts once and a large sink never overflows an exp.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 1;
layout(constant_id = 4) const uint T = 1;
layout(constant_id = 5) const float SCALE = 1.0;
layout(constant_id = 6) const uint WINDOW = 0;
layout(constant_id = 7) const uint BQ = 1;
layout(constant_id = 8) const uint BKV = 32;

layout(binding = 0) readonly buffer QB { float q[]; };
#define KV_BK 1
#define KV_BV 2
#include "kv_cache.glsl"     // f32 or (KV_F16) f16 caches
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) writeonly buffer OB { float o[]; };
#ifdef SINKS
layout(binding = 5) readonly buffer SinkB { float sinks[]; };
#endif

const uint G = H / KVH, QG = BQ * G, DP = D + 1;   // rows padded by one float: no bank conflicts
const uint NA = (QG * D + gl_WorkGroupSize.x - 1) / gl_WorkGroupSize.x;   // outputs per invocation
const uint NQ = QG * BKV / gl_WorkGroupSize.x;   // scores per invocation (WG divides QG * BKV)
shared float qs[QG * DP];     // the workgroup's query vectors (scaled), vector v = row (v / G), head v % G
shared float kvs[BKV * DP];   // a tile of K rows, then of V rows
shared float ps[QG * BKV];    // scores, then probabilities
shared float rowf[QG];        // per query vector: the tile's rescale factor; l at the end

// rows base .. base + n - 1 of kv head g's K or V into kvs (zeros past n): with D % 4 == 0 a vec4
// (4 halves of an f16 cache) per load, adjacent invocations on adjacent vec4s of a row
#define LOAD_TILE(C1, C4)                                                                   \
    if (D % 4 == 0) {                                                                       \
        for (uint e = tid; e < BKV * D / 4; e += WG) {                                      \
            const uint k = e / (D / 4), j = 4 * (e % (D / 4));                              \
            const vec4 w = k < n ? C4(((base + k) * ROW + kvoff + j) / 4) : vec4(0.0);      \
            for (uint c = 0; c < 4; c++) kvs[k * DP + j + c] = w[c];                        \
        }                                                                                   \
    } else {                                                                                \
        for (uint e = tid; e < BKV * D; e += WG) {                                          \
            const uint k = e / D, j = e % D;                                                \
            kvs[k * DP + j] = k < n ? C1((base + k) * ROW + kvoff + j) : 0.0;               \
        }                                                                                   \
    }

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint tid = gl_LocalInvocationID.x;
    const uint g = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BQ;
    const uint ROW = KVH * D, kvoff = g * D;
    const uint pos = step[STEP_POS];
    const uint nrows = min(BQ, T - t0);
    const uint lo_all = window_start(pos + t0 + 1, WINDOW);   // the first row's window starts first
    const uint len_all = pos + t0 + nrows;                    // the last row sees the most keys

    for (uint e = tid; e < QG * D; e += WG) {
        const uint v = e / D, j = e % D, t = t0 + v / G;
        qs[v * DP + j] = t < T ? q[(t * H + g * G + v % G) * D + j] * SCALE : 0.0;
    }
    // the softmax state of query vector tid (invocations < QG)
    const uint my_len = pos + t0 + tid / G + 1;
    const uint my_lo = window_start(my_len, WINDOW);
    float m = NEG_INF, l = 0.0;
#ifdef SINKS
    if (tid < QG) {
        m = sinks[g * G + tid % G];
        l = 1.0;
    }
#endif
    float acc[NA];
    for (uint a = 0; a < NA; a++) acc[a] = 0.0;

    for (uint base = lo_all; base < len_all; base += BKV) {
        const uint n = min(BKV, len_all - base);
        barrier();                      // kvs, ps and rowf of the previous tile are consumed
        LOAD_TILE(KC1, KC4)
        barrier();
        {   // NQ query vectors x key k per invocation: each K value loaded once for NQ of them,
            // the q values broadcast (a warp's 32 lanes = the tile's 32 keys of one vector)
            const uint k = tid % BKV;
            float sc[NQ];
            for (uint i = 0; i < NQ; i++) sc[i] = 0.0;
            for (uint j = 0; j < D; j++) {
                const float kv = kvs[k * DP + j];
                for (uint i = 0; i < NQ; i++) sc[i] += qs[(tid / BKV + i * (WG / BKV)) * DP + j] * kv;
            }
            for (uint i = 0; i < NQ; i++) ps[(tid / BKV + i * (WG / BKV)) * BKV + k] = sc[i];
        }
        barrier();
        if (tid < QG) {
            float mt = NEG_INF;
            for (uint k = 0; k < n; k++) {
                const uint i = base + k;
                if (i >= my_lo && i < my_len) mt = max(mt, ps[tid * BKV + k]);
            }
            const float mn = max(m, mt);
            const float corr = mn == NEG_INF ? 1.0 : exp(m - mn);   // 0 after a first tile (m = -inf)
            float sum = 0.0;
            for (uint k = 0; k < BKV; k++) {
                const uint i = base + k;
                const float p = (k < n && i >= my_lo && i < my_len) ? exp(ps[tid * BKV + k] - mn) : 0.0;
                ps[tid * BKV + k] = p;
                sum += p;
            }
            l = l * corr + sum;
            m = mn;
            rowf[tid] = corr;
        }
        LOAD_TILE(VC1, VC4)                             // K was last read before the barrier above
        barrier();
        // WG a multiple of D: every output of an invocation has the same d, so one V load per key
        // serves all NA of them; otherwise each output walks the keys on its own
        const uint d0 = tid % D;
        float pv[NA];
        for (uint a = 0; a < NA; a++) pv[a] = 0.0;
        for (uint k = 0; k < n; k++) {
            const float vv = WG % D == 0 ? kvs[k * DP + d0] : 0.0;
            for (uint a = 0; a < NA; a++) {
                const uint e = min(tid + a * WG, QG * D - 1), v = e / D;
                pv[a] += ps[v * BKV + k] * (WG % D == 0 ? vv : kvs[k * DP + e % D]);
            }
        }
        for (uint a = 0; a < NA; a++) {
            const uint e = tid + a * WG;
            if (e < QG * D) acc[a] = acc[a] * rowf[e / D] + pv[a];
        }
    }
    barrier();                          // rowf's last rescale factors are consumed
    if (tid < QG) rowf[tid] = l;
    barrier();
    for (uint a = 0; a < NA; a++) {
        const uint e = tid + a * WG;
        const uint v = e / D, d = e % D, t = t0 + v / G;
        if (e < QG * D && t < T) o[(t * H + g * G + v % G) * D + d] = acc[a] / rowf[v];
    }
}

#version 450
#extension GL_GOOGLE_include_directive : require
// attention over a prompt chunk, tiled (GQA, causal): workgroup (h, b) computes chunk rows
// b*BQ .. b*BQ+BQ-1 of head h, the same result as attention_rows.comp (softmax(scale * q . K) V
// over kv rows lo..pos+t of kv head h / (H / KVH)) but K and V are staged through shared memory
// a tile of BK keys at a time and used by all BQ query rows: attention_rows gives each (row, head)
// its own workgroup, each invocation one key and a serial D-long dot read straight from the cache,
// so every key is read T times per head (Qwen3-0.6B, 512 rows: 1.5 ms a layer on an H100).
// Online softmax per query row (running max m, sum l), one pass over the tiles.
// Bindings: 0 q, 1 k_cache, 2 v_cache, 3 step, 4 o. Spec: 0 wg size, 1 H, 2 KVH, 3 D, 4 T,
// 5 scale (float), 6 WINDOW (0 = none), 7 BQ (query rows per workgroup), 8 BK (keys per tile).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 1;
layout(constant_id = 4) const uint T = 1;
layout(constant_id = 5) const float SCALE = 1.0;
layout(constant_id = 6) const uint WINDOW = 0;
layout(constant_id = 7) const uint BQ = 16;
layout(constant_id = 8) const uint BK = 32;

layout(binding = 0) readonly buffer QB { float q[]; };
#define KV_BK 1
#define KV_BV 2
#include "kv_cache.glsl"     // f32 or (KV_F16) f16 caches
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) writeonly buffer OB { float o[]; };

const uint KS = D + 1;      // padded key stride: the lanes of a score loop read different banks
shared float qs[BQ * D];
shared float ks[BK * KS];
shared float vs[BK * D];
shared float ps[BQ * BK];
shared float row_m[BQ];     // running max of each query row
shared float row_l[BQ];     // running softmax denominator
shared float row_c[BQ];     // this tile's rescale of the row's earlier sums

// outputs (query row, element) per invocation: o = tid + WG * k
const uint NO = (BQ * D + gl_WorkGroupSize.x - 1) / gl_WorkGroupSize.x;
const uint NS = (BQ * BK + gl_WorkGroupSize.x - 1) / gl_WorkGroupSize.x;

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint tid = gl_LocalInvocationID.x;
    const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BQ;
    const uint ROW = KVH * D;
    const uint kvoff = (h / (H / KVH)) * D;
    const uint pos = step[STEP_POS];
    const uint nq = min(BQ, T - t0);                       // query rows of this block
    const uint hi = pos + t0 + nq;                         // keys [.., hi) cover every row
    const uint lo = window_start(pos + t0 + 1, WINDOW);    // the first row's window starts first

    for (uint e = tid; e < BQ * D; e += WG) {
        uint r = e / D;
        qs[e] = r < nq ? q[((t0 + r) * H + h) * D + e % D] * SCALE : 0.0;
    }
    if (tid < BQ) { row_m[tid] = NEG_INF; row_l[tid] = 0.0; }
    float acc[NO];
    for (uint k = 0; k < NO; k++) acc[k] = 0.0;

    for (uint base = lo; base < hi; base += BK) {
        barrier();   // the previous tile's ks / vs / ps are consumed
        for (uint e = tid; e < BK * D; e += WG) {
            uint j = e / D, d = e % D, i = base + j;
            bool in_range = i < hi;
            ks[j * KS + d] = in_range ? KC1(i * ROW + kvoff + d) : 0.0;
            vs[e] = in_range ? VC1(i * ROW + kvoff + d) : 0.0;
        }
        barrier();
        for (uint k = 0; k < NS; k++) {
            uint e = tid + WG * k;
            if (e < BQ * BK) {
                uint r = e / BK, j = e % BK, i = base + j;
                uint len = pos + t0 + r + 1;                // row r sees keys [wlo, len)
                uint wlo = window_start(len, WINDOW);
                float s = NEG_INF;
                if (r < nq && i < len && i >= wlo) {
                    s = 0.0;
                    for (uint d = 0; d < D; d++) s += qs[r * D + d] * ks[j * KS + d];
                }
                ps[e] = s;
            }
        }
        barrier();
        if (tid < BQ) {
            // one invocation per row: the tile's max, the rescale of the earlier sums, exp in place
            float m_old = row_m[tid], mx = m_old;
            for (uint j = 0; j < BK; j++) mx = max(mx, ps[tid * BK + j]);
            float sum = 0.0;
            for (uint j = 0; j < BK; j++) {
                float s = ps[tid * BK + j];
                float p = s == NEG_INF ? 0.0 : exp(s - mx);
                ps[tid * BK + j] = p;
                sum += p;
            }
            float c = m_old == NEG_INF ? 0.0 : exp(m_old - mx);
            row_c[tid] = c;
            row_l[tid] = row_l[tid] * c + sum;
            row_m[tid] = mx;
        }
        barrier();
        for (uint k = 0; k < NO; k++) {
            uint e = tid + WG * k;
            if (e < BQ * D) {
                uint r = e / D, d = e % D;
                float a = 0.0;
                for (uint j = 0; j < BK; j++) a += ps[r * BK + j] * vs[j * D + d];
                acc[k] = acc[k] * row_c[r] + a;
            }
        }
    }
    barrier();
    for (uint k = 0; k < NO; k++) {
        uint e = tid + WG * k;
        uint r = e / D;
        if (e < BQ * D && r < nq) o[((t0 + r) * H + h) * D + e % D] = acc[k] / row_l[r];
    }
}

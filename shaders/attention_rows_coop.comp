#version 450
#extension GL_GOOGLE_include_directive : require
#include "coopmat.glsl"
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_control_flow_attributes : require
#define UNROLL [[unroll]]   // loops over matrices: unrolled, their arrays stay in registers
// attention over a prompt chunk on the tensor cores (coopmat.glsl; f16 KV caches,
// causal, a sliding window or none), one pass with an online softmax, a kv head per workgroup:
// workgroup (g, b) runs the G = H / KVH query heads of kv head g over chunk rows
// t0 = b 16 RB .. t0 + 16 RB - 1, one subgroup (LANES >= 16 lanes) per head and 16-row block
// (subgroup sg: head g G + sg % G, rows t0 + 16 (sg / G) ..), so each tile of BKV keys is read
// from the cache once (16-byte loads, staged through registers while the previous tile computes)
// into shared memory and used by all G RB subgroups; the earlier kernel read K and V straight
// from the cache per subgroup and went over the keys twice, and was slower than the f32 kv-head
// kernel at head_dim 128.
// Per tile, per subgroup: S (16 rows x BKV keys) = Q (16 x D f16, scale folded in) x K^T, stored
// to shared memory; lanes (row r = lane % 16, the LANES / 16 lanes of a row a part of its keys
// each) take the masked row max and write P = exp(s - m) as f16; O (16 x D, f32 accumulators)
// += P x V.
// The running max m only moves when a row's tile max exceeds it by more than RESCALE (then every
// row of the subgroup moves to its new max and O, l are multiplied by exp(m_old - m_new)); below
// that P is at most e^RESCALE, well inside f16, and softmax does not depend on the reference
// point. The rescale (and the final 1 / l) needs each accumulator element's row, and a cooperative
// matrix's element layout is the implementation's: the accumulator goes through the subgroup's
// score rows in shared memory, where rows are rows. Nothing is rescaled while every row still
// has m = -inf (its sums are zero).
// Keys past a row's pos + t are masked (later chunk rows, stale rows of rejected drafts); the tile
// holds zeros past the workgroup's last row (and past the cache's end), so 0 x NaN of an unwritten
// row never reaches a sum. WINDOW > 0: row p sees keys p - WINDOW + 1 .. p; the workgroup starts at
// the tile holding its first row's first key and a subgroup skips the tiles before its own rows'
// window (uniformly, as past its last row); keys of a tile before a row's window are masked like
// keys after it (the cache rows there are written: finite).
// SINKS (gpt-oss): binding 5 sinks[H], one more logit per head in each row's denominator, added at
// the end as exp(sink - m) against the row's final reference m: P stays relative to the scores
// (a sink of +30 as the start of m would round every P to f16 zero), and l is f32.
// Bindings: 0 q, 1 k_cache, 2 v_cache, 3 step, 4 o. Spec: 0 wg size (LANES G RB), 1 H, 2 KVH,
// 3 D (a multiple of 16), 4 T (a multiple of 16 RB), 5 scale (float), 6 RB, 7 BKV (keys per tile,
// a multiple of 16), 8 WINDOW (0: none).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 16;
layout(constant_id = 4) const uint T = 16;
layout(constant_id = 5) const float SCALE = 1.0;
layout(constant_id = 6) const uint RB = 1;
layout(constant_id = 7) const uint BKV = 32;
layout(constant_id = 8) const uint WINDOW = 0;

layout(binding = 0) readonly buffer QB { float q[]; };
layout(binding = 1) readonly buffer KB { uvec4 k8[]; };     // 8 halves per element
layout(binding = 2) readonly buffer VB { uvec4 v8[]; };
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) writeonly buffer OB { float o[]; };
#ifdef SINKS
layout(binding = 5) readonly buffer SinkB { float sinks[]; };
#endif

const uint G = H / KVH;
const uint WG = gl_WorkGroupSize.x, NSG = WG / LANES;
const uint PARTS = LANES / 16, PK = BKV / PARTS;    // softmax: lanes per row, keys per lane
const uint DS = D + 8;                 // halves per staged row (16-byte aligned, banks spread)
const uint SS = BKV + 4;               // floats per score row
const uint PS = BKV + 8;               // halves per probability row (>= 16 + 8: also stages Q)
const uint TILE8 = BKV * D / 8;        // uvec4s per K (or V) tile
const uint NLD = (TILE8 + WG - 1) / WG;
const float RESCALE = 8.0;

uint window_lo(uint p) {  // the first key position p sees
    return (WINDOW == 0u || p < WINDOW) ? 0u : p + 1u - WINDOW;
}
// K and V tiles staged 8 halves (16 bytes) at a time, as they come from the cache; matrix loads
// count in those elements. H200, a layer at 512 rows from position 1536: 427.6 -> 380.9 us with
// the 8B's heads (32 / 8 x 128) against 16-bit stores, 315.5 -> 305.1 with Qwen3-30B-A3B's (32 / 4)
// (bench/results/nvidia-h200/2026-11-28-attn-staging).
shared uvec4 ks[BKV * DS / 8];
shared uvec4 vs[BKV * DS / 8];
#define KV_AT(row, col) ((row) * (DS / 8) + (col) / 8)
#define KV_LD (DS / 8)
shared float ss[NSG * 16 * SS];
shared float16_t ps[NSG * 16 * PS];
shared float rowf[NSG * 16];           // per row: the rescale factor, then 1 / l
#define SYNC() { subgroupMemoryBarrierShared(); subgroupBarrier(); }

uvec4 kreg[NLD], vreg[NLD];

// tile keys base .. base + BKV - 1 of kv head g into registers (zeros at keys >= n)
void fetch(uint base, uint n, uint kvoff8, uint tid) {
    for (uint i = 0; i < NLD; i++) {
        const uint e = tid + i * WG, key = e / (D / 8), j = e % (D / 8);
        const bool live = e < TILE8 && base + key < n;
        const uint at = live ? (base + key) * (KVH * D / 8) + kvoff8 + j : 0u;
        kreg[i] = live ? k8[at] : uvec4(0u);
        vreg[i] = live ? v8[at] : uvec4(0u);
    }
}

void stage(uint tid) {
    for (uint i = 0; i < NLD; i++) {
        const uint e = tid + i * WG;
        if (e >= TILE8) break;
        ks[KV_AT(e / (D / 8), 8 * (e % (D / 8)))] = kreg[i];
        vs[KV_AT(e / (D / 8), 8 * (e % (D / 8)))] = vreg[i];
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x, lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
    const uint g = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * 16 * RB;
    const uint h = g * G + sg % G, tb = t0 + 16 * (sg / G);    // this subgroup's head and first row
    const uint pos = step[STEP_POS];
    const uint bs = sg * 16 * SS, bp = sg * 16 * PS, bf = sg * 16;

    // Q (scaled, f16) a 16 x 16 block at a time through the subgroup's probability rows
    CM_A qa[D / 16];
    UNROLL for (uint i = 0; i < D / 16; i++) {
        for (uint e = lane; e < 256; e += LANES)
            ps[bp + (e / 16) * PS + e % 16] = float16_t(q[((tb + e / 16) * H + h) * D + 16 * i + e % 16] * SCALE);
        SYNC();
        coopMatLoad(qa[i], ps, bp, PS, CM_ROW);
        SYNC();
    }

    CM_C acc[D / 16];
    UNROLL for (uint i = 0; i < D / 16; i++) acc[i] = CM_C(0.0);
    const uint r = lane % 16, c0 = (lane / 16) * PK;          // softmax: row r, keys c0 .. c0 + PK - 1
    const uint qp = pos + tb + r;                 // row r's position: it sees keys lo .. qp
    const uint lo = window_lo(qp);
    const uint n_sg = pos + tb + 16;              // keys this subgroup's last row sees
    const uint lo_sg = window_lo(pos + tb);       // ... its first row's first key
    const uint n_all = pos + t0 + 16 * RB;        // ... the workgroup's last row
    const uint first = window_lo(pos + t0) / BKV * BKV;
    const uint kvoff8 = g * (D / 8);
    float m = NEG_INF, l = 0.0;

    fetch(first, n_all, kvoff8, tid);
    for (uint base = first; base < n_all; base += BKV) {
        barrier();                                // the previous tile is consumed
        stage(tid);
        barrier();
        if (base + BKV < n_all) fetch(base + BKV, n_all, kvoff8, tid);   // in flight during the MMAs
        if (base >= n_sg || base + BKV <= lo_sg) continue;   // subgroup-uniform: outside its rows' keys
                                                  // (the loop's trip count, so its barriers, stay uniform)
        // the key blocks' chains of D / 16 dependent multiplies side by side (the same H200 runs:
        // 2-3% on top of the staging)
        CM_C s[BKV / 16];
        UNROLL for (uint b = 0; b < BKV / 16; b++) s[b] = CM_C(0.0);
        UNROLL for (uint i = 0; i < D / 16; i++) {
            UNROLL for (uint b = 0; b < BKV / 16; b++) {
                CM_B kb;
                coopMatLoad(kb, ks, KV_AT(16 * b, 16 * i), KV_LD, CM_COL);
                s[b] = coopMatMulAdd(qa[i], kb, s[b]);
            }
        }
        UNROLL for (uint b = 0; b < BKV / 16; b++) coopMatStore(s[b], ss, bs + 16 * b, SS, CM_ROW);
        SYNC();
        float mt = NEG_INF;
        // the row's scores read once into registers (masked ones -inf), for the max and the exp;
        // H100, one layer of 2048 rows from position 5952: the 8B's heads 3771 -> 2845 us, the 1B's
        // 2427 -> 1451, against reading them from shared memory twice behind the mask's branch
        // (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-attn17)
        float sv[PK];
        UNROLL for (uint c = 0; c < PK; c++) {
            const bool ok = base + c0 + c <= qp && base + c0 + c >= lo;
            sv[c] = ok ? ss[bs + r * SS + c0 + c] : NEG_INF;
            mt = max(mt, sv[c]);
        }
        for (uint x = 16; x < LANES; x *= 2) mt = max(mt, subgroupShuffleXor(mt, x));
        const float mn = max(m, mt);
        const bool moved = subgroupAny(mn > m + RESCALE);     // m = -inf before the first tile
        const bool fresh = subgroupAll(m == NEG_INF);           // every row's sums still zero
        const float alpha = moved ? (m == NEG_INF ? 0.0 : exp(m - mn)) : 1.0;
        if (moved) m = mn;
        float sum = 0.0;
        UNROLL for (uint c = 0; c < PK; c++) {
            const float p = sv[c] == NEG_INF ? 0.0 : exp(sv[c] - m);
            ps[bp + r * PS + c0 + c] = float16_t(p);
            sum += p;
        }
        for (uint x = 16; x < LANES; x *= 2) sum += subgroupShuffleXor(sum, x);
        l = l * alpha + sum;
        if (lane < 16) rowf[bf + r] = alpha;
        SYNC();
        // the rows' factors through the (now read) score rows, and every loop over matrices
        // unrolled: with accumulator elements indexed by a row-id matrix and the loops left to the
        // driver, the accumulators sat in local memory (H200: 384 bytes of it an invocation; now
        // 128). A layer at 512 rows from position 1536: 8B heads 372 -> 249 us, Qwen3-30B-A3B's
        // 301 -> 170 (bench/results/nvidia-h200/2026-11-28-attn-staging).
        if (moved && !fresh)
            UNROLL for (uint i = 0; i < D / 16; i++) {
                coopMatStore(acc[i], ss, bs, SS, CM_ROW);
                SYNC();
                for (uint e = lane; e < 256; e += LANES) ss[bs + (e / 16) * SS + e % 16] *= rowf[bf + e / 16];
                SYNC();
                coopMatLoad(acc[i], ss, bs, SS, CM_ROW);
                SYNC();
            }
        UNROLL for (uint b = 0; b < BKV / 16; b++) {
            CM_A pa;
            coopMatLoad(pa, ps, bp + 16 * b, PS, CM_ROW);
            UNROLL for (uint i = 0; i < D / 16; i++) {
                CM_B vb;
                coopMatLoad(vb, vs, KV_AT(16 * b, 16 * i), KV_LD, CM_ROW);
                acc[i] = coopMatMulAdd(pa, vb, acc[i]);
            }
        }
        SYNC();                                   // rowf, ss and ps are read before they are rewritten
    }
#ifdef SINKS
    l += exp(sinks[h] - m);                       // m is finite: a row always sees its own key
#endif
    if (lane < 16) rowf[bf + r] = 1.0 / l;
    SYNC();
    UNROLL for (uint i = 0; i < D / 16; i++) {
        coopMatStore(acc[i], ss, bs, SS, CM_ROW);
        SYNC();
        for (uint e = lane; e < 256; e += LANES)
            o[((tb + e / 16) * H + h) * D + 16 * i + e % 16] = ss[bs + (e / 16) * SS + e % 16] * rowf[bf + e / 16];
        SYNC();
    }
}

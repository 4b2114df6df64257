#version 450
#extension GL_GOOGLE_include_directive : require
// PERSISTENT_FFN_QKV: a layer's feed-forward half and the next layer's q/k/v projections in ONE
// dispatch of resident workgroups, the three dependent phases separated by a grid barrier
// (device-scope atomics) instead of a pipeline barrier and a new dispatch:
//   1  g  = silu(W_gate h) * (W_up h),   h = x / rms(x) * norm_ffn     (RMS_NORM_MATMUL_SILU_MUL)
//   2  y  = x + W_down g                                                (MATMUL_ADD)
//   3  q, k, v = W_{q,k,v} (y / rms(y) * norm_attn)  [QKV only]         (RMS_NORM_MATMUL)
// Every phase hands row blocks of RB rows to subgroups (block b to subgroup b mod all subgroups of
// the grid); a subgroup's lanes stride over the row's units and reduce with subgroupAdd, so no phase
// has a workgroup barrier. The grid barrier needs every workgroup resident at once: vkdecode/
// persistent.py enables this kernel only where a probe run of this very pipeline (mode 1) showed it,
// never on CPU devices. The waits are bounded: a workgroup that waits SPIN polls gives up and sets
// the error word (host-visible), which the executor checks, so a device where the grid is not
// resident gets an error, never a hang.
// Push: mode (0 all phases with grid barriers, 1 the probe: PROBE_N grid barriers and nothing else,
//   2 + p phase p alone: no barrier, for a per-phase dispatch chain, 5+ nothing), spin (poll bound).
// Bindings (numbers from persistent.py, as defines): B_X x, B_NF norm_ffn, WB_0/SB_0 gate,
//   WB_1/SB_1 up, B_G g, WB_2/SB_2 down, B_Y y, QKV: B_NA norm_attn, WB_3..5/SB_3..5 q k v,
//   B_Q B_K B_V; B_SYNC (arrivals, departures; zero between dispatches), B_ERR (error word).
// Spec: 0 wg size, 1 KH (hidden), 2 KF (ffn), 3 EPS_F, 4 EPS_A, 5 MQ, 6 MK, 7 MV.
// Defines: the weights' DT_* and WVEC, QKV; RB1 RB2 RB3 (rows per subgroup block of each phase,
// default 2) and UNR (units a lane loads before using them, default 4) for A/B runs
// (VKDECODE_DEFINES). An L2 prefetch of the next phase's rows before each grid barrier measured no
// faster on an H100 and was removed (bench/results/nvidia-h100-80gb-hbm3/persistent/).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint KH = 64;
layout(constant_id = 2) const uint KF = 64;
layout(constant_id = 3) const float EPS_F = 1e-6;
layout(constant_id = 4) const float EPS_A = 1e-6;
layout(constant_id = 5) const uint MQ = 1;
layout(constant_id = 6) const uint MK = 1;
layout(constant_id = 7) const uint MV = 1;
const uint MF = KF;     // gate / up rows
const uint MH = KH;     // down rows
#define PROBE_N 8u

layout(push_constant) uniform P { uint mode; uint spin; } pc;

layout(binding = B_X) readonly buffer XB { vec4 x4[]; };
layout(binding = B_X) readonly buffer X1B { float x1[]; };
layout(binding = B_NF) readonly buffer NFB { vec4 nf4[]; };
// g and y are written and read by other workgroups of this dispatch: coherent (no stale L1 line)
layout(binding = B_G) coherent buffer GB { vec4 g4[]; };
layout(binding = B_G) coherent buffer G1B { float g1[]; };
layout(binding = B_Y) coherent buffer YB { vec4 y4[]; };
layout(binding = B_Y) coherent buffer Y1B { float y1[]; };
layout(binding = B_SYNC) coherent buffer SyncB { uint sync_w[]; };
layout(binding = B_ERR) buffer ErrB { uint err_w[]; };

// sum of squares of the activations a norm phase loaded so far (lanes' parts)
float pf_ss = 0.0;
vec4 nx_ffn(uint i) { const vec4 a = x4[i]; pf_ss += dot(a, a); return a * nf4[i]; }

#define FW_NO_FMV_ROWS 1
#define X4(i) nx_ffn(i)
#define X1(i) x1[i]
#define SLOT 0
#include "fused_wslot.glsl"
#undef SLOT
#define SLOT 1
#include "fused_wslot.glsl"
#undef SLOT
#undef X4
#undef X1
#define X4(i) g4[i]
#define X1(i) g1[i]
#define SLOT 2
#include "fused_wslot.glsl"
#undef SLOT
#undef X4
#undef X1

#ifdef QKV
layout(binding = B_NA) readonly buffer NAB { vec4 na4[]; };
layout(binding = B_Q) writeonly buffer QB { float q_out[]; };
layout(binding = B_K) writeonly buffer KB { float k_out[]; };
layout(binding = B_V) writeonly buffer VB { float v_out[]; };
vec4 nx_attn(uint i) { const vec4 a = y4[i]; pf_ss += dot(a, a); return a * na4[i]; }
#define X4(i) nx_attn(i)
#define X1(i) y1[i]
#define SLOT 3
#include "fused_wslot.glsl"
#undef SLOT
#define SLOT 4
#include "fused_wslot.glsl"
#undef SLOT
#define SLOT 5
#include "fused_wslot.glsl"
#undef SLOT
#undef X4
#undef X1
#endif
// every slot has the weights' one dtype: ROW_WORDS / ROW_SCALES are the same for all of them

#ifndef RB1
#define RB1 2
#endif
#ifndef RB2
#define RB2 2
#endif
#ifndef RB3
#define RB3 2
#endif

// rows past m - 1 re-read row m - 1 (their sums are dropped): no divergent loads
uint row_at(uint b, uint i, uint rb, uint m) { return min(b * rb + i, m - 1u); }

// the lane's row pick without dynamic indexing of a private array (keeps it in registers)
#define PICK(arr, n, lane, out_v) { out_v = arr[0]; for (uint i_ = 1u; i_ < (n); i_++) if (i_ == (lane)) out_v = arr[i_]; }

// The lane's units of a row, UNR at a time: the activations of UNR units are loaded before any is
// used, so a lane has UNR (times rows) weight loads in flight instead of one round trip per unit.
#ifndef UNR
#define UNR 4
#endif
#define UNIT_LOOP(KK, LOADX, BODY) \
    for (uint u0 = lane; u0 < (KK) / UNIT_ELEMS; u0 += UNR * L) { \
        vec4 xs[UNR][XU_VEC4]; \
        for (uint j = 0u; j < UNR; j++) { \
            const uint u = u0 + j * L; \
            if (u < (KK) / UNIT_ELEMS) LOADX(u, xs[j]); \
        } \
        for (uint j = 0u; j < UNR; j++) { \
            const uint u = u0 + j * L; \
            if (u < (KK) / UNIT_ELEMS) { BODY } \
        } \
    }

void phase_gate_up(uint sgi, uint nsg) {
    const uint lane = gl_SubgroupInvocationID, L = gl_SubgroupSize;
    const uint blocks = (MF + RB1 - 1u) / RB1;
    for (uint b = sgi; b < blocks; b += nsg) {   // uniform over the subgroup
        float ag[RB1], au[RB1];
        for (uint i = 0u; i < RB1; i++) { ag[i] = 0.0; au[i] = 0.0; }
        pf_ss = 0.0;
#define PH1_BODY \
            for (uint i = 0u; i < RB1; i++) { \
                const uint r = row_at(b, i, RB1, MF); \
                ag[i] += unit_dot_0(r * ROW_WORDS(KH), r * ROW_SCALES(KH), u, xs[j]); \
                au[i] += unit_dot_1(r * ROW_WORDS(KH), r * ROW_SCALES(KH), u, xs[j]); \
            }
        UNIT_LOOP(KH, load_x_0, PH1_BODY)
        const float inv = inversesqrt(subgroupAdd(pf_ss) / float(KH) + EPS_F);
        for (uint i = 0u; i < RB1; i++) { ag[i] = subgroupAdd(ag[i]); au[i] = subgroupAdd(au[i]); }
        if (lane < RB1 && b * RB1 + lane < MF) {
            float gs, us;
            PICK(ag, RB1, lane, gs)
            PICK(au, RB1, lane, us)
            gs *= inv;
            us *= inv;
            g1[b * RB1 + lane] = gs / (1.0 + exp(-gs)) * us;
        }
    }
}

void phase_down(uint sgi, uint nsg) {
    const uint lane = gl_SubgroupInvocationID, L = gl_SubgroupSize;
    const uint blocks = (MH + RB2 - 1u) / RB2;
    for (uint b = sgi; b < blocks; b += nsg) {
        float a[RB2];
        for (uint i = 0u; i < RB2; i++) a[i] = 0.0;
#define PH2_BODY \
            for (uint i = 0u; i < RB2; i++) { \
                const uint r = row_at(b, i, RB2, MH); \
                a[i] += unit_dot_2(r * ROW_WORDS(KF), r * ROW_SCALES(KF), u, xs[j]); \
            }
        UNIT_LOOP(KF, load_x_2, PH2_BODY)
        for (uint i = 0u; i < RB2; i++) a[i] = subgroupAdd(a[i]);
        if (lane < RB2 && b * RB2 + lane < MH) {
            float s;
            PICK(a, RB2, lane, s)
            const uint row = b * RB2 + lane;
            y1[row] = x1[row] + s;
        }
    }
}

#ifdef QKV
// blocks of q, then k, then v; a block's projection is uniform over the subgroup
void phase_qkv(uint sgi, uint nsg) {
    const uint lane = gl_SubgroupInvocationID, L = gl_SubgroupSize;
    const uint bq = (MQ + RB3 - 1u) / RB3, bk = (MK + RB3 - 1u) / RB3, bv = (MV + RB3 - 1u) / RB3;
    for (uint b0 = sgi; b0 < bq + bk + bv; b0 += nsg) {
        const uint p = b0 < bq ? 0u : (b0 < bq + bk ? 1u : 2u);
        const uint b = p == 0u ? b0 : (p == 1u ? b0 - bq : b0 - bq - bk);
        const uint m = p == 0u ? MQ : (p == 1u ? MK : MV);
        float a[RB3];
        for (uint i = 0u; i < RB3; i++) a[i] = 0.0;
        pf_ss = 0.0;
#define PH3_BODY \
            for (uint i = 0u; i < RB3; i++) { \
                const uint r = row_at(b, i, RB3, m); \
                const uint rw = r * ROW_WORDS(KH), rs = r * ROW_SCALES(KH); \
                a[i] += p == 0u ? unit_dot_3(rw, rs, u, xs[j]) \
                                : (p == 1u ? unit_dot_4(rw, rs, u, xs[j]) : unit_dot_5(rw, rs, u, xs[j])); \
            }
        UNIT_LOOP(KH, load_x_3, PH3_BODY)
        const float inv = inversesqrt(subgroupAdd(pf_ss) / float(KH) + EPS_A);
        for (uint i = 0u; i < RB3; i++) a[i] = subgroupAdd(a[i]);
        if (lane < RB3 && b * RB3 + lane < m) {
            float s;
            PICK(a, RB3, lane, s)
            s *= inv;
            const uint row = b * RB3 + lane;
            if (p == 0u) q_out[row] = s; else if (p == 1u) k_out[row] = s; else v_out[row] = s;
        }
    }
}
#endif

#include "grid_sync.glsl"

void main() {
    const uint sgi = gl_WorkGroupID.x * gl_NumSubgroups + gl_SubgroupID;
    const uint nsg = gl_NumWorkGroups.x * gl_NumSubgroups;
    if (pc.mode > 4u) return;   // nothing: the dispatch's own cost (bench/persistent_probe.py)
    if (pc.mode == 1u) {
        for (uint n = 1u; n <= PROBE_N; n++) grid_sync(n);
        grid_leave();
        return;
    }
    if (pc.mode == 0u || pc.mode == 2u) phase_gate_up(sgi, nsg);
    if (pc.mode == 0u) grid_sync(1u);
    if (pc.mode == 0u || pc.mode == 3u) phase_down(sgi, nsg);
#ifdef QKV
    if (pc.mode == 0u) grid_sync(2u);
    if (pc.mode == 0u || pc.mode == 4u) phase_qkv(sgi, nsg);
#endif
    if (pc.mode == 0u) grid_leave();
}

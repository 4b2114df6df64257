#version 450
#extension GL_GOOGLE_include_directive : require
#include "coopmat.glsl"
#extension GL_EXT_control_flow_attributes : require
// Every loop over the accumulator or fragment arrays is [[unroll]]: where the driver left one as a
// loop it indexed acc[] at run time and kept the whole array in local memory (H100: the grouped
// expert matmul at 64 x 64 slots, 256 B, 962 -> 297 us; bench/results/nvidia-h100-80gb-hbm3/
// 2026-12-07-unroll20)
// matmul over a wide prompt chunk on the tensor cores (coopmat.glsl: VK_KHR_cooperative_matrix,
// 16 x 16 x 16 f16 inputs, f32 sums): Y[t, row0 + m] = W[m, :] . X[t, :], W of any weight dtype
// decoded into f16 in the tile loader (dequant_half.glsl where it has the dtype, without a
// conversion instruction; else dequant.glsl in f32), X rounded to f16 once before (X_F16) or there
// (the prompt path's loss against the f32 kernels: an f16 rounding of each input, sums in f32).
// A workgroup of SG_M x SG_N subgroups (of LANES lanes: fixed there, or required by the pipeline)
// owns a BM x BN output tile; each subgroup a BLK_M x BLK_N grid of 16 x 16 accumulators. Per
// BK-wide k step the decoded weight tile and the activation tile are staged in shared memory as
// f16 rows of BK (+8 halves so that the 16 row starts of a matrix load fall on different banks);
// the next step's weights and activations are fetched into registers before this step's
// multiplies, so their memory latency hides behind the tensor work.
// C (t x m) = A (t x k, the activation tile, row-major) x B (k x m, the weight tile read
// column-major: a weight row is a column of B).
// Exact tiles only (coop.coop_shape): M % BM == 0, T % BN == 0, K % BK == 0.
// SPLITK: workgroup z sums k tiles z, z+S, ... into P[z][t][m]; matmul_rows_splitk adds them.
// Bindings: f32/f16: 0 W, 1 X, 2 Y (or P); quant: 0 q words, 1 scales, 2 X, 3 Y (or P).
// Spec: 0 wg size (LANES SG_M SG_N), 1 K, 2 M (rows bound), 3 T, 4 MTOT (Y row stride), 5 S.
// Defines: SG_M, SG_N, BLK_M, BLK_N; BK_STEP (the k step, 32 unless 64); UNITS (dequant.glsl's
// unit loads) or QUADS or neither;
// X_F16: X is f16 (4 halves a uvec2), converted once per chunk by to_f16.comp (lowering/half_x.py).
// MOE (moe_rows.glsl): workgroup y is one tile of one expert's slots (up to BN, rows past its
// count repeat its last row and are not stored); each 16 x 16 result goes through the subgroup's
// shared staging block to its slots' scattered rows. Spec 6 XDIV, 7 GROUP_ORDER. GLU_SILU (with
// MOE): each stored element is silu(G) * the sum, G (the gate matmul's output, Y's layout) at
// binding B_G + 1 (moe_rows.glsl MOE_OUT).
// X_ROWSCALE (with X_F16): to_f16.comp ROW_SCALE divided some of X's rows by powers of two (Gemma
// 3's activations pass f16's range); each result goes through the subgroup's staging block and is
// multiplied by its x row's factor (binding B_XS: after Y, or with MOE after the groups and the
// gate) as it is stored.
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_X 1
#else
#define B_S 1
#define B_X 2
#endif
#define B_Y (B_X + 1)
#ifdef UNITS
#define UNIT_WEIGHTS 1
#endif
#include "dequant.glsl"
#ifdef QUADS
#include "dequant_quad.glsl"
#endif
#include "dequant_half.glsl"
#if defined(HALF_QUADS) && !defined(W_F32)
// The tile's weights decoded straight to f16 (dequant_half.glsl), four a quad, whatever UNITS says.
// W_F32: dequant_quad / unit_weights in f32 and a conversion at the store instead (the A/B).
#define W_HALF 1
#undef UNITS
#endif
#ifndef ROW_SCALES
#define ROW_SCALES(k) ((k) / 32)
#endif

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint M = 1;
layout(constant_id = 3) const uint T = 1;
layout(constant_id = 4) const uint MTOT = 1;
layout(constant_id = 5) const uint S = 1;
layout(push_constant) uniform Push { uint row0; } pc;
#ifdef X_F16
// X already f16 (to_f16.comp, once per chunk): the tile loader copies it, no conversion a k step
layout(binding = B_X) readonly buffer XB4 { uvec2 x4[]; };
#define X_REG uvec2
#else
layout(binding = B_X) readonly buffer XB4 { vec4 x4[]; };
#define X_REG vec4
#endif
layout(binding = B_Y) writeonly buffer YB { float y[]; };
#include "moe_rows.glsl"
#ifdef X_ROWSCALE
#if defined(GLU_SILU)
#define B_XS (B_GATE + 1)
#elif defined(MOE)
#define B_XS (B_G + 1)
#else
#define B_XS (B_Y + 1)
#endif
layout(binding = B_XS) readonly buffer XSB { float x_scale[]; };
#define X_FACTOR(n) x_scale[XROW(n)]
#else
#define X_FACTOR(n) 1.0
#endif

#ifndef BK_STEP
#define BK_STEP 32
#endif
// a whole quant block per k step; BK_STEP 64 (coop.coop_bk: tiles of 8 or more subgroups) halves
// the barriers a k for twice the staged tile: it pays on those (H100, the 8B's prompt on 64 x 256
// 63.2 -> 53.4 ms) and lost on 4-subgroup tiles (58.0 -> 77.8 on 64 x 128)
const uint BK = BK_STEP;
const uint WG = LANES * SG_M * SG_N;
const uint BM = 16 * BLK_M * SG_M, BN = 16 * BLK_N * SG_N;
// Staged rows of BK + 8 halves (16-byte aligned rows, the 16 row starts of a matrix load on
// different banks), 4 halves per uvec2 element: a vec4 of the tile goes to shared memory as one
// 8-byte store (H100, Qwen3-0.6B matmuls at 512 rows: 299 -> 253 us a layer against 16-bit stores);
// matrix loads count offsets and strides in elements of the array.
const uint LDV = (BK + 8) / 4;
shared uvec2 ws[BM * LDV];             // ws[m * LDV + k / 4]: weight row m of the tile
shared uvec2 xs[BN * LDV];             // xs[t * LDV + k / 4]: chunk row t of the tile
#if defined(MOE) || defined(X_ROWSCALE)
shared float ys[256 * SG_M * SG_N];   // a 16 x 16 result block per subgroup, on its way to scattered rows
#endif
#define TILE_AT(row, kk) ((row) * LDV + (kk) / 4)
#define STORE4(arr, row, kk, v) arr[TILE_AT(row, kk)] = uvec2(packFloat2x16(f16vec2((v).xy)), packFloat2x16(f16vec2((v).zw)))

#ifdef UNITS
const uint UPR = BK / UNIT_ELEMS;                  // units per weight row of a k tile
const uint NWU = (BM * UPR + WG - 1) / WG;         // weight units per invocation
#define WR_VEC4 XU_VEC4
#else
const uint NWU = (BM * (BK / 4) + WG - 1) / WG;    // weight quads per invocation
#define WR_VEC4 1
#endif
const uint NXV = (BN * (BK / 4) + WG - 1) / WG;    // activation vec4s per invocation
#ifdef W_HALF
uvec2 wr[NWU];                                     // four f16 weights an element
#else
vec4 wr[NWU * WR_VEC4];
#endif
X_REG xr[NXV];
// Where each of an invocation's activation vec4s starts in x4 at k 0: the same chunk rows every
// k step, so MOE's gathered row (a load of the order list) is read once, not once a step.
uint xat[NXV];

void x_rows(uint n0, uint tid) {
    for (uint i = 0; i < NXV; i++) {
        const uint e = min(tid + i * WG, BN * (BK / 4) - 1), c = e / (BK / 4);
        xat[i] = XROW(min(n0 + c, TILE_ROWS - 1)) * (K / 4) + e % (BK / 4);
    }
}

// Fetch the k tile at k0 into registers (wr, xr).
void fetch(uint m0, uint k0, uint tid) {
    for (uint i = 0; i < NWU; i++) {
#ifdef UNITS
        const uint e = min(tid + i * WG, BM * UPR - 1), r = e / UPR, u = k0 / UNIT_ELEMS + e % UPR;
        vec4 w[XU_VEC4];
        unit_weights(WROW(m0 + r) * ROW_WORDS(K), WROW(m0 + r) * ROW_SCALES(K), u, w);
        for (uint j = 0; j < XU_VEC4; j++) wr[i * XU_VEC4 + j] = w[j];
#else
        const uint e = min(tid + i * WG, BM * (BK / 4) - 1), r = e / (BK / 4), k = k0 + 4 * (e % (BK / 4));
        const uint m = WROW(m0 + r);
#if defined(W_HALF)
        wr[i] = dequant_half(m * ROW_WORDS(K), m * ROW_SCALES(K), k);
#elif defined(QUADS)
        wr[i] = dequant_quad(m * ROW_WORDS(K), m * ROW_SCALES(K), k);
#else
        for (uint c = 0; c < 4; c++) wr[i][c] = dequant_elem(m * ROW_WORDS(K), m * ROW_SCALES(K), k + c);
#endif
#endif
    }
    for (uint i = 0; i < NXV; i++) xr[i] = x4[xat[i] + k0 / 4];
}

// Store the registers into the shared tiles as f16 (an index clamped by fetch stores a duplicate
// of the last element's value onto itself: harmless).
void stage(uint k0, uint tid) {
    for (uint i = 0; i < NWU; i++) {
#ifdef UNITS
        const uint e = min(tid + i * WG, BM * UPR - 1), r = e / UPR, u = k0 / UNIT_ELEMS + e % UPR;
        for (uint j = 0; j < XU_VEC4; j++) {
            const uint kk = 4 * unit_vec4(u, j) - k0;
            STORE4(ws, r, kk, wr[i * XU_VEC4 + j]);
        }
#else
        const uint e = min(tid + i * WG, BM * (BK / 4) - 1), r = e / (BK / 4), kk = 4 * (e % (BK / 4));
#ifdef W_HALF
        ws[TILE_AT(r, kk)] = wr[i];
#else
        STORE4(ws, r, kk, wr[i]);
#endif
#endif
    }
    for (uint i = 0; i < NXV; i++) {
        const uint e = min(tid + i * WG, BN * (BK / 4) - 1), c = e / (BK / 4), kk = 4 * (e % (BK / 4));
#ifdef X_F16
        xs[TILE_AT(c, kk)] = xr[i];
#else
        STORE4(xs, c, kk, xr[i]);
#endif
    }
}

void main() {
    const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
    const uint sm = sg % SG_M, sn = sg / SG_M;
    const uint m0 = gl_WorkGroupID.x * BM, n0 = TILE_N0(BN), z = gl_WorkGroupID.z;
    if (!moe_tile(gl_WorkGroupID.y)) return;    // MOE: a tile past the expert groups' count
    CM_C acc[BLK_N * BLK_M];
    [[unroll]] for (uint i = 0; i < BLK_N * BLK_M; i++) acc[i] = CM_C(0.0);

    x_rows(n0, tid);
    uint k0 = z * BK;
    if (k0 < K) fetch(m0, k0, tid);
    for (; k0 < K; k0 += S * BK) {
        stage(k0, tid);
        barrier();
        if (k0 + S * BK < K) fetch(m0, k0 + S * BK, tid);
        [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
            CM_A a[BLK_N];
            CM_B b[BLK_M];
            [[unroll]] for (uint i = 0; i < BLK_N; i++)
                coopMatLoad(a[i], xs, TILE_AT(16 * (sn * BLK_N + i), kk), LDV, CM_ROW);
            [[unroll]] for (uint j = 0; j < BLK_M; j++)
                coopMatLoad(b[j], ws, TILE_AT(16 * (sm * BLK_M + j), kk), LDV, CM_COL);
            [[unroll]] for (uint i = 0; i < BLK_N; i++)
                [[unroll]] for (uint j = 0; j < BLK_M; j++)
                    acc[i * BLK_M + j] = coopMatMulAdd(a[i], b[j], acc[i * BLK_M + j]);
        }
        barrier();
    }
    [[unroll]] for (uint i = 0; i < BLK_N; i++) {
        const uint t = n0 + 16 * (sn * BLK_N + i);
        [[unroll]] for (uint j = 0; j < BLK_M; j++) {
            const uint m = m0 + 16 * (sm * BLK_M + j);
#if defined(MOE)
            coopMatStore(acc[i * BLK_M + j], ys, 256 * sg, 16, CM_ROW);
            subgroupBarrier();
            for (uint e = gl_SubgroupInvocationID; e < 256; e += LANES) {
                if (t + e / 16 < TILE_ROWS) {
                    const uint at = YROW(t + e / 16) * MTOT + m + e % 16;
                    y[at] = MOE_OUT(at, ys[256 * sg + e] * X_FACTOR(t + e / 16));
                }
            }
            subgroupBarrier();
#elif defined(X_ROWSCALE)
            coopMatStore(acc[i * BLK_M + j], ys, 256 * sg, 16, CM_ROW);
            subgroupBarrier();
            for (uint e = gl_SubgroupInvocationID; e < 256; e += LANES) {
                const uint tt = t + e / 16, mm = m + e % 16;
#ifdef SPLITK
                y[(z * T + tt) * M + mm] = ys[256 * sg + e] * X_FACTOR(tt);
#else
                y[tt * MTOT + pc.row0 + mm] = ys[256 * sg + e] * X_FACTOR(tt);
#endif
            }
            subgroupBarrier();
#elif defined(SPLITK)
            coopMatStore(acc[i * BLK_M + j], y, (z * T + t) * M + m, M, CM_ROW);
#else
            coopMatStore(acc[i * BLK_M + j], y, t * MTOT + pc.row0 + m, MTOT, CM_ROW);
#endif
        }
    }
}

#version 450
#extension GL_GOOGLE_include_directive : require
#include "coopmat.glsl"
// Ceiling probes of the tensor-core matmul (bench/coop_ceiling.py; never shipped). Each mode keeps
// one more piece of shaders/matmul_rows_coop.comp, so the step from one mode's rate to the next
// is what that piece costs on the device:
//   MODE 0: the multiplies alone (fragments loaded once, ITERS k steps of 16 multiply-adds);
//   MODE 1: + the fragment loads from shared memory every k step of 16 (coopMatLoad of BLK_N
//           A and BLK_M B matrices from a BK-wide tile, as the kernel does);
//   MODE 2: + the tile's stores and the two barriers of each BK step (values made up from
//           registers: no global memory at all);
//   MODE 3: MODE 2 with two shared buffers, one barrier per BK step;
//   MODE 4: MODE 3 with the tile read from memory, as the kernel's f16 weights and f32 chunk rows
//           (binding 1: f16 weights of WROWS rows of K = ITERS * BK; binding 2: f32 x of 512 rows):
//           the next step's loads in registers during this step's multiplies.
// ITERS counts k steps of 16 (MODE 0, 1) or of BK (MODE 2-4). BK: the k step of a tile (32).
// Defines: SG_M, SG_N, BLK_M, BLK_N as the kernel's; MODE; ELEM 0 (uvec2 array, the kernel's), 1
// (float16_t), 2 (uvec4); BROW (B matrices row-major instead of the kernel's column-major).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint ITERS = 64;
layout(constant_id = 2) const uint WROWS = 14336;
layout(binding = 0) writeonly buffer OutB { float outp[]; };
#if MODE == 4
layout(binding = 1) readonly buffer WB { uvec2 w2[]; };
layout(binding = 2) readonly buffer XB { vec4 x4[]; };
#endif

#ifndef BK
#define BK 32
#endif
const uint WG = LANES * SG_M * SG_N;
const uint BM = 16 * BLK_M * SG_M, BN = 16 * BLK_N * SG_N;
#if ELEM == 1
#define ST float16_t
const uint EB = 2;
#elif ELEM == 2
#define ST uvec4
const uint EB = 16;
#else
#define ST uvec2
const uint EB = 8;
#endif
const uint LD = (BK + 8) * 2 / EB;     // elements of ST per staged row of BK (+8) halves
#if MODE >= 3
const uint NBUF = 2;
#else
const uint NBUF = 1;
#endif
shared ST ws[NBUF * BM * LD];
shared ST xs[NBUF * BN * LD];
#define AT(row, kk) ((row) * LD + (kk) * 2 / EB)
#ifdef BROW
#define BLAYOUT CM_ROW
#else
#define BLAYOUT CM_COL
#endif

ST made_up(uint v) {
#if ELEM == 1
    return float16_t(float(v & 7u) * 0.125);
#elif ELEM == 2
    return uvec4(v, v + 1u, v + 2u, v + 3u) & 0x3c003c00u;
#else
    return uvec2(v, v + 1u) & 0x3c003c00u;
#endif
}

// The tile's stores of one BK step: every invocation its share of BM + BN rows of BK halves.
void stage(const uint buf, uint step, uint tid) {
    const uint per_row = BK * 2 / EB;
    for (uint e = tid; e < BM * per_row; e += WG)
        ws[buf * BM * LD + (e / per_row) * LD + e % per_row] = made_up(e + step);
    for (uint e = tid; e < BN * per_row; e += WG)
        xs[buf * BN * LD + (e / per_row) * LD + e % per_row] = made_up(e ^ step);
}

CM_C acc[BLK_N * BLK_M];
CM_A a[BLK_N];
CM_B b[BLK_M];

void multiply(const uint buf, uint sm, uint sn) {
    for (uint kk = 0; kk < BK; kk += 16) {
        for (uint i = 0; i < BLK_N; i++)
            coopMatLoad(a[i], xs, buf * BN * LD + AT(16 * (sn * BLK_N + i), kk), LD, CM_ROW);
        for (uint j = 0; j < BLK_M; j++)
            coopMatLoad(b[j], ws, buf * BM * LD + AT(16 * (sm * BLK_M + j), kk), LD, BLAYOUT);
        for (uint i = 0; i < BLK_N; i++)
            for (uint j = 0; j < BLK_M; j++) acc[i * BLK_M + j] = coopMatMulAdd(a[i], b[j], acc[i * BLK_M + j]);
    }
}

#if MODE == 4
// the kernel's loader for f16 weights (uvec2: 4 halves) and f32 x (vec4), a k tile in registers
const uint NW = (BM * BK / 4 + WG - 1) / WG, NX = (BN * BK / 4 + WG - 1) / WG;
uvec2 wr[NW];
vec4 xr[NX];
void fetch(uint m0, uint n0, uint k0, uint tid) {
    const uint K = ITERS * BK;
    for (uint i = 0; i < NW; i++) {
        const uint e = min(tid + i * WG, BM * BK / 4 - 1);
        wr[i] = w2[((m0 + e / (BK / 4)) * K + k0) / 4 + e % (BK / 4)];
    }
    for (uint i = 0; i < NX; i++) {
        const uint e = min(tid + i * WG, BN * BK / 4 - 1);
        xr[i] = x4[((n0 + e / (BK / 4)) * K + k0) / 4 + e % (BK / 4)];
    }
}
void store(const uint buf, uint tid) {
    for (uint i = 0; i < NW; i++) {
        const uint e = min(tid + i * WG, BM * BK / 4 - 1);
        ws[buf * BM * LD + AT(e / (BK / 4), 4 * (e % (BK / 4)))] = wr[i];
    }
    for (uint i = 0; i < NX; i++) {
        const uint e = min(tid + i * WG, BN * BK / 4 - 1);
        xs[buf * BN * LD + AT(e / (BK / 4), 4 * (e % (BK / 4)))] =
            uvec2(packFloat2x16(f16vec2(xr[i].xy)), packFloat2x16(f16vec2(xr[i].zw)));
    }
}
// step it of ITERS: multiplies on buffer buf while the next tile loads, then stored into the other
void step4(const uint buf, uint it, uint m0, uint n0, uint sm, uint sn, uint tid) {
    if (it + 1 < ITERS) fetch(m0, n0, (it + 1) * BK, tid);
    multiply(buf, sm, sn);
    if (it + 1 < ITERS) store(1 - buf, tid);
    barrier();
}
#endif

void step3(const uint buf, uint it, uint sm, uint sn, uint tid) {
    multiply(buf, sm, sn);
    stage(1 - buf, it + 2, tid);
    barrier();
}

void main() {
    const uint tid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
    const uint sm = sg % SG_M, sn = sg / SG_M;
    for (uint i = 0; i < BLK_N * BLK_M; i++) acc[i] = CM_C(0.0);
#if MODE == 4
    const uint mt = WROWS / BM, m0 = (gl_WorkGroupID.x % mt) * BM, n0 = (gl_WorkGroupID.x / mt) % (512 / BN) * BN;
    fetch(m0, n0, 0, tid);
    store(0, tid);
#else
    stage(0, 0, tid);
#endif
    barrier();
#if MODE == 0
    for (uint i = 0; i < BLK_N; i++) coopMatLoad(a[i], xs, AT(16 * (sn * BLK_N + i), 0), LD, CM_ROW);
    for (uint j = 0; j < BLK_M; j++) coopMatLoad(b[j], ws, AT(16 * (sm * BLK_M + j), 0), LD, BLAYOUT);
    for (uint it = 0; it < ITERS; it++) {
        for (uint i = 0; i < BLK_N; i++)
            for (uint j = 0; j < BLK_M; j++) acc[i * BLK_M + j] = coopMatMulAdd(a[i], b[j], acc[i * BLK_M + j]);
    }
#elif MODE == 1
    for (uint it = 0; it < ITERS; it++) {
        const uint kk = 16 * (it % (BK / 16));
        for (uint i = 0; i < BLK_N; i++) coopMatLoad(a[i], xs, AT(16 * (sn * BLK_N + i), kk), LD, CM_ROW);
        for (uint j = 0; j < BLK_M; j++) coopMatLoad(b[j], ws, AT(16 * (sm * BLK_M + j), kk), LD, BLAYOUT);
        for (uint i = 0; i < BLK_N; i++)
            for (uint j = 0; j < BLK_M; j++) acc[i * BLK_M + j] = coopMatMulAdd(a[i], b[j], acc[i * BLK_M + j]);
    }
#elif MODE == 2
    for (uint it = 0; it < ITERS; it++) {
        if (it > 0) {
            stage(0, it, tid);
            barrier();
        }
        multiply(0, sm, sn);
        barrier();
    }
#elif MODE == 3
    for (uint it = 0; it < ITERS; it += 2) {   // two steps a pass: each buffer's offsets constant
        step3(0, it, sm, sn, tid);
        step3(1, it + 1, sm, sn, tid);
    }
#else
    for (uint it = 0; it < ITERS; it += 2) {
        step4(0, it, m0, n0, sm, sn, tid);
        step4(1, it + 1, m0, n0, sm, sn, tid);
    }
#endif
    for (uint i = 1; i < BLK_N * BLK_M; i++) acc[0] = acc[0] + acc[i];
    coopMatStore(acc[0], outp, 256 * (gl_WorkGroupID.x * SG_M * SG_N + sg), 16, CM_ROW);
}

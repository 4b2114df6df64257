// Matrix-vector core: y[row0 + r] = W[r, :] . x for the M rows bound to B_W/B_S, ROWS rows per
// workgroup. Every invocation of the workgroup walks the row's units (uvec4 / block) with a
// stride of the workgroup size and keeps one accumulator per row, so each activation unit is
// loaded once for all ROWS rows; the ROWS partial sums are then reduced across the workgroup.
// Fused kernels include this with their own X1/X4 (e.g. normalised x) and MV_STORE(row, value).
//
// Spec constants: 0 workgroup size (common.glsl), 1 K (in-dim), 2 M (rows bound), 3 ROWS.
// Push constant: row0, the first output row (non-zero for the parts of a row-split weight).
//
// Mixture-of-experts hooks (moe_matmul.comp, moe_matmul_sum_add.comp; defaults: a plain matvec):
// MV_GROUP() the row block of this workgroup; MV_SLOTS slots summed into each row, slot j reading
// W's rows from MV_ROW_BASE(j) (an expert's rows in a 3-D weight) scaled by MV_SLOT_WEIGHT(j); the
// includer declares `uint mv_slot`, set to j while slot j runs, for its X1/X4 to pick j's input.
#ifndef MV_GROUP
#define MV_GROUP() flat_group_id()
#endif
#ifndef MV_SLOTS
#define MV_SLOTS 1u
#define MV_SLOT_SET(j)
#else
#define MV_SLOT_SET(j) mv_slot = (j)
#endif
#ifndef MV_ROW_BASE
#define MV_ROW_BASE(j) 0u
#endif
#ifndef MV_SLOT_WEIGHT
#define MV_SLOT_WEIGHT(j) 1.0
#endif

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint M = 1;
layout(constant_id = 3) const uint ROWS = 1;

layout(push_constant) uniform MatvecPush { uint row0; } mv_pc;

#ifdef USE_SUBGROUP
shared float mv_red[ROWS * gl_WorkGroupSize.x];  // only gl_NumSubgroups entries per row used
#else
shared float mv_red[ROWS * gl_WorkGroupSize.x];
#endif

#ifdef MV_PART
// MV_PART: each workgroup also stores the sum of the squares of the outputs it stored, as
// MV_PART_STORE(workgroup, sum): the includer's MV_STORE sets mv_sq to its output's square
// (matmul_add.comp NORM_OUT). Call from uniform control flow, after the stores.
float mv_sq = 0.0;
void mv_part() {
    const uint t = gl_LocalInvocationID.x;
#ifdef USE_SUBGROUP
    if (ROWS <= gl_SubgroupSize) {   // the storing invocations 0..ROWS-1 are all in subgroup 0
        if (gl_SubgroupID == 0u) {
            const float s = subgroupAdd(mv_sq);
            if (subgroupElect()) MV_PART_STORE(flat_group_id(), s);
        }
        return;
    }
#endif
    barrier();   // mv_red may still be read by the reduction
    mv_red[t] = mv_sq;
    barrier();
    if (t == 0u) {
        float s = 0.0;
        for (uint i = 0; i < ROWS; i++) s += mv_red[i];
        MV_PART_STORE(flat_group_id(), s);
    }
}
#define MV_DONE() mv_part()
#else
#define MV_DONE()
#endif

void matvec_main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint t = gl_LocalInvocationID.x;
    const uint first = MV_GROUP() * ROWS;
    if (first >= M) return;  // whole workgroup leaves together: no barrier is skipped
    const uint units = K / UNIT_ELEMS;

    float acc[ROWS];
    for (uint i = 0; i < ROWS; i++) acc[i] = 0.0;
    for (uint j = 0; j < MV_SLOTS; j++) {
    MV_SLOT_SET(j);
    const uint base = MV_ROW_BASE(j);
    const float sw = MV_SLOT_WEIGHT(j);
    for (uint u = t; u < units; u += WG) {
#ifdef KW_SPLIT
#define KW_ACC(i) acc[i]
#define KW_M M
#include "kwide_rows.glsl"
#undef KW_ACC
#undef KW_M
#else
        vec4 xv[XU_VEC4];
        load_x(u, xv);
        for (uint i = 0; i < ROWS; i++) {
            // Rows past M re-read the last row instead of branching; their sums are dropped.
            uint r = min(first + i, M - 1) + base;
            acc[i] += sw * unit_dot(r * ROW_WORDS(K), r * ROW_SCALES(K), u, xv);
        }
#endif
    }
    }

#ifdef USE_SUBGROUP
    for (uint i = 0; i < ROWS; i++) acc[i] = subgroupAdd(acc[i]);
    if (gl_NumSubgroups == 1) {
        if (t < ROWS && first + t < M) {
            // acc is uniform now; pick row t without dynamic indexing of a private array.
            float v = acc[0];
            for (uint i = 1; i < ROWS; i++) if (i == t) v = acc[i];
            MV_STORE(mv_pc.row0 + first + t, v);
        }
        MV_DONE();
        return;
    }
    if (subgroupElect())
        for (uint i = 0; i < ROWS; i++) mv_red[i * WG + gl_SubgroupID] = acc[i];
    barrier();
    if (t < ROWS && first + t < M) {
        float v = 0.0;
        for (uint s = 0; s < gl_NumSubgroups; s++) v += mv_red[t * WG + s];
        MV_STORE(mv_pc.row0 + first + t, v);
    }
    MV_DONE();
#else
    for (uint i = 0; i < ROWS; i++) mv_red[i * WG + t] = acc[i];
    barrier();
    for (uint h = WG / 2; h > 0; h >>= 1) {
        if (t < h)
            for (uint i = 0; i < ROWS; i++) mv_red[i * WG + t] += mv_red[i * WG + t + h];
        barrier();
    }
    if (t < ROWS && first + t < M) MV_STORE(mv_pc.row0 + first + t, mv_red[t * WG]);
    MV_DONE();
#endif
}

// Matrix-vector core: y[row0 + r] = W[r, :] . x for the M rows bound to B_W/B_S, ROWS rows per
// workgroup. Every invocation of the workgroup walks the row's units (uvec4 / block) with a
// stride of the workgroup size and keeps one accumulator per row, so each activation unit is
// loaded once for all ROWS rows; the ROWS partial sums are then reduced across the workgroup.
// Fused kernels include this with their own X1/X4 (e.g. normalised x) and MV_STORE(row, value).
//
// Spec constants: 0 workgroup size (common.glsl), 1 K (in-dim), 2 M (rows bound), 3 ROWS.
// Push constant: row0, the first output row (non-zero for the parts of a row-split weight).
// MV_XROWS=XR (matmul.comp over a batched decode step, fusion/chunk_batch.py): XR rows of x, each
// unit of a weight row read once for all of them; output j of a workgroup is weight row j % ROWS
// of x row j / ROWS, stored MTOT (spec 4) apart. The includer's X1/X4 read x row mv_xrow and its
// MV_STORE writes y row mv_xrow. XR is a define: the accumulators acc[XR][ROWS] are sized at
// compile time (one SPIR-V per batch width).
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
#define MV_SLOTS_FLAT
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
#ifdef MV_XROWS
const uint XR = MV_XROWS;
layout(constant_id = 4) const uint MTOT = 1;
#define MV_STORE_J(j, v) { mv_xrow = (j) / ROWS; MV_STORE(mv_pc.row0 + first + (j) % ROWS, v); }
#else
const uint XR = 1;
#define MV_STORE_J(j, v) MV_STORE(mv_pc.row0 + first + (j), v)
#endif
const uint MV_NOUT = ROWS * XR;  // outputs per workgroup

layout(push_constant) uniform MatvecPush { uint row0; } mv_pc;

#ifdef USE_SUBGROUP
shared float mv_red[MV_NOUT * gl_WorkGroupSize.x];  // only gl_NumSubgroups entries per row used
#else
shared float mv_red[MV_NOUT * gl_WorkGroupSize.x];
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

    float acc[XR][ROWS];
    for (uint b = 0; b < XR; b++)
        for (uint i = 0; i < ROWS; i++) acc[b][i] = 0.0;
#ifdef MV_SLOTS_FLAT
    // the slots' units as one loop (slot j's unit u is v = j * units + u): a row of few units
    // (768-wide MoE downs: 96, or 24 wide) leaves no lanes idle through every slot
    for (uint v = t; v < MV_SLOTS * units; v += WG) {
    const uint j = v / units, u = v - j * units;
    MV_SLOT_SET(j);
    const uint base = MV_ROW_BASE(j);
    const float sw = MV_SLOT_WEIGHT(j);
    {
#else
    const uint base = MV_ROW_BASE(0u);
    const float sw = MV_SLOT_WEIGHT(0u);
    {
    for (uint u = t; u < units; u += WG) {
#endif
#ifdef KW_SPLIT
#ifdef MV_XROWS
// every x row through the unit's weight words, loaded once (kwide_rows.glsl KW_XROWS)
#define KW_XROWS XR
#define KW_XROW(b) mv_xrow = (b)
#define KW_ACC(i) acc[kw_b][i]
#else
#define KW_ACC(i) acc[0][i]
#endif
#define KW_M M
#define KW_BASE base
#define KW_WEIGHT sw
#include "kwide_rows.glsl"
#undef KW_ACC
#ifdef MV_XROWS
#undef KW_XROWS
#undef KW_XROW
#endif
#undef KW_M
#undef KW_BASE
#undef KW_WEIGHT
#else
        for (uint b = 0; b < XR; b++) {
            vec4 xv[XU_VEC4];
#ifdef MV_XROWS
            mv_xrow = b;
#endif
            load_x(u, xv);
            for (uint i = 0; i < ROWS; i++) {
                // Rows past M re-read the last row instead of branching; their sums are dropped.
                uint r = min(first + i, M - 1) + base;
                acc[b][i] += sw * unit_dot(r * ROW_WORDS(K), r * ROW_SCALES(K), u, xv);
            }
        }
#endif
    }
    }

#ifdef USE_SUBGROUP
    for (uint b = 0; b < XR; b++)
        for (uint i = 0; i < ROWS; i++) acc[b][i] = subgroupAdd(acc[b][i]);
    if (gl_NumSubgroups == 1) {
#ifdef MV_XROWS
        // acc is uniform now: one invocation stores all XR * ROWS outputs, by static indices (a
        // pick loop per output made lavapipe's first 8-row step compile for over 30 s)
        if (t == 0u)
            for (uint b = 0; b < XR; b++)
                for (uint i = 0; i < ROWS; i++)
                    if (first + i < M) MV_STORE_J(b * ROWS + i, acc[b][i]);
#else
        if (t < ROWS && first + t < M) {
            // acc is uniform now; pick row t without dynamic indexing of a private array.
            float v = acc[0][0];
            for (uint i = 1; i < ROWS; i++) if (i == t) v = acc[0][i];
            MV_STORE_J(t, v);
        }
#endif
        MV_DONE();
        return;
    }
    if (subgroupElect())
        for (uint b = 0; b < XR; b++)
            for (uint i = 0; i < ROWS; i++) mv_red[(b * ROWS + i) * WG + gl_SubgroupID] = acc[b][i];
    barrier();
    // outputs t, t + WG, ...: a batch's XR * ROWS outputs may outnumber the invocations
    for (uint j = t; j < MV_NOUT; j += WG) {
        if (first + j % ROWS >= M) continue;
        float v = 0.0;
        for (uint s = 0; s < gl_NumSubgroups; s++) v += mv_red[j * WG + s];
        MV_STORE_J(j, v);
    }
    MV_DONE();
#else
    for (uint b = 0; b < XR; b++)
        for (uint i = 0; i < ROWS; i++) mv_red[(b * ROWS + i) * WG + t] = acc[b][i];
    barrier();
    for (uint h = WG / 2; h > 0; h >>= 1) {
        if (t < h)
            for (uint i = 0; i < MV_NOUT; i++) mv_red[i * WG + t] += mv_red[i * WG + t + h];
        barrier();
    }
    for (uint j = t; j < MV_NOUT; j += WG)
        if (first + j % ROWS < M) MV_STORE_J(j, mv_red[j * WG]);
    MV_DONE();
#endif
}

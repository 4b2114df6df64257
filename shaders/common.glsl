// Shared by every vkdecode compute shader: step-buffer layout, group indexing, reductions.
// Include right after `#version 450`. Define USE_SUBGROUP (kernels.py does so when the device has
// subgroup arithmetic) to reduce with subgroupAdd/Max; otherwise a shared-memory tree is used.
// Every shader sets its workgroup size from constant_id 0 (local_size_x_id), a power of two.
#ifdef USE_SUBGROUP
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout(local_size_x_id = 0) in;

// Words of the u32[8] step buffer (fusion/ir.py). Per-token values are only ever read from here.
#define STEP_TOKEN 0
#define STEP_POS 1
#define STEP_SEED 2
// A batched decode step (fusion/chunk_batch.py, define BATCH) reads one such record per row, whose
// words STEP_SLOT and STEP_LIVE name the row's KV slot and whether it advances after the step.
#define STEP_WORDS 8
#define STEP_SLOT 6
#define STEP_LIVE 7
// A prompt chunk's record: STEP_LIVE is its rows that are prompt tokens (the rest padding), 0 for
// all of them. The recurrent ops (conv1d_step, gated_delta_step) step their state only through those.
#define chunk_rows(ROWS) (step[STEP_LIVE] == 0u ? (ROWS) : min(step[STEP_LIVE], (ROWS)))

#define NEG_INF uintBitsToFloat(0xff800000u)

// First kv row attention reads for a query at row len - 1: a sliding window of W keys (the query
// itself included, transformers' kv_idx > q_idx - W) starts at len - W; W = 0 means all rows.
uint window_start(uint len, uint W) {
    return (W != 0u && len > W) ? len - W : 0u;
}

// Workgroups may be laid out 2-D when a call needs more than 65535 (the minimum maxComputeWorkGroupCount).
uint flat_group_id() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

#ifndef NO_WG_REDUCE
// One float per invocation; wg_sum / wg_max return the result to every invocation. Contains
// barriers, so call from uniform control flow only.
shared float wg_red[gl_WorkGroupSize.x];

float wg_sum(float v) {
#ifdef USE_SUBGROUP
    v = subgroupAdd(v);
    if (gl_NumSubgroups == 1) return v;
    barrier();  // wg_red may still be read by a previous call
    if (subgroupElect()) wg_red[gl_SubgroupID] = v;
    barrier();
    float s = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++) s += wg_red[i];
    return s;
#else
    uint t = gl_LocalInvocationID.x;
    barrier();
    wg_red[t] = v;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        if (t < h) wg_red[t] += wg_red[t + h];
        barrier();
    }
    return wg_red[0];
#endif
}

float wg_max(float v) {
#ifdef USE_SUBGROUP
    v = subgroupMax(v);
    if (gl_NumSubgroups == 1) return v;
    barrier();
    if (subgroupElect()) wg_red[gl_SubgroupID] = v;
    barrier();
    float m = NEG_INF;
    for (uint i = 0; i < gl_NumSubgroups; i++) m = max(m, wg_red[i]);
    return m;
#else
    uint t = gl_LocalInvocationID.x;
    barrier();
    wg_red[t] = v;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        if (t < h) wg_red[t] = max(wg_red[t], wg_red[t + h]);
        barrier();
    }
    return wg_red[0];
#endif
}
#endif

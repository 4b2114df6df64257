#version 450
#extension GL_GOOGLE_include_directive : require
// kv_write over a prompt chunk: cache rows step.pos .. step.pos + T - 1 := k / v (T rows of ROW,
// ROW even; f32 or, with KV_F16, f16 caches: kv_cache.glsl).
// BATCH (fusion/chunk_batch.py): row t goes to cache row slot * SLOT_ROWS + pos of its own step
// record (step[t * STEP_WORDS + ...]).
// Bindings: 0 k, 1 v, 2 step, 3 k_cache, 4 v_cache. Spec: 0 wg size, 1 ROW, 2 T, 3 SLOT_ROWS.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint ROW = 1;
layout(constant_id = 2) const uint T = 1;
layout(constant_id = 3) const uint SLOT_ROWS = 1;
layout(binding = 0) readonly buffer KB { float k[]; };
layout(binding = 1) readonly buffer VB { float v[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };
#define KV_BK 3
#define KV_BV 4
#define KV_WRITE 1
#include "kv_cache.glsl"

// one invocation per element pair: an f16 cache word (KV_F16) is written whole by one invocation
void main() {
    uint i = 2 * (flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x);
    if (i >= T * ROW) return;
#ifdef BATCH
    uint rec = (i / ROW) * STEP_WORDS;  // ROW is even: a pair never straddles two rows
    uint o = (step[rec + STEP_SLOT] * SLOT_ROWS + step[rec + STEP_POS]) * ROW + i % ROW;
#else
    uint o = step[STEP_POS] * ROW + i;
#endif
    KC_PUT2(o, k[i], k[i + 1]);
    VC_PUT2(o, v[i], v[i + 1]);
}

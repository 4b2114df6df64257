#version 450
#extension GL_GOOGLE_include_directive : require
// kv_write: k_cache[pos] = k, v_cache[pos] = v, pos from the step buffer; one invocation per
// element, or with KV_F16 (f16 caches, ROW even) per pair: an f16 cache word is written whole by
// one invocation (kv_cache.glsl).
// Bindings: 0 k, 1 v, 2 step, 3 k_cache, 4 v_cache. Spec: 0 wg size, 1 ROW (= kv_heads * head_dim).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint ROW = 2;
layout(binding = 0) readonly buffer KB { float k[]; };
layout(binding = 1) readonly buffer VB { float v[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };
#define KV_BK 3
#define KV_BV 4
#define KV_WRITE 1
#include "kv_cache.glsl"

void main() {
    uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
#ifdef KV_F16
    i *= 2;
    if (i >= ROW) return;
    KC_PUT2(step[STEP_POS] * ROW + i, k[i], k[i + 1]);
    VC_PUT2(step[STEP_POS] * ROW + i, v[i], v[i + 1]);
#else
    if (i >= ROW) return;
    kc[step[STEP_POS] * ROW + i] = k[i];
    vc[step[STEP_POS] * ROW + i] = v[i];
#endif
}

#version 450
#extension GL_GOOGLE_include_directive : require
// moe_topk: per row of E router logits, p = softmax(logits), the TOPK largest p in descending order
// (ties: lower index first) -> ids, and their p (divided by their sum with NORM) -> weights. One
// workgroup per row (a chunk's rows are workgroups). Bindings: 0 logits, 1 ids, 2 weights.
// Spec: 0 wg size, 1 E, 2 TOPK.
#include "common.glsl"

layout(constant_id = 1) const uint E = 8;
layout(constant_id = 2) const uint TOPK = 2;

layout(binding = 0) readonly buffer LB { float logits[]; };
layout(binding = 1) writeonly buffer IB { uint ids[]; };
layout(binding = 2) writeonly buffer WB { float weights[]; };

#include "moe_select.glsl"

void main() {
    const uint row = flat_group_id();
    for (uint e = gl_LocalInvocationID.x; e < E; e += gl_WorkGroupSize.x) moe_p[e] = logits[row * E + e];
    moe_softmax_pick();
    moe_store(row);
}

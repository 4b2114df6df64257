#version 450
#extension GL_GOOGLE_include_directive : require
// Merges the key splits of attention_rows_coop.comp (SPLIT) into o: one invocation per 4 elements
// of a row's head. A row whose workgroup saw no more than one split's keys was written whole by the
// attention and is left alone; the others take the splits 0 .. (pos + t) / C, every one of which
// holds at least one of the row's keys (l > 0):
//   o = sum_z e^(m_z - M) o_z / sum_z e^(m_z - M) l_z, M = max_z m_z.
// Bindings: 0 partials, 1 o, 2 step. Spec: 0 wg size, 1 H, 2 D (a multiple of 4), 3 T, 4 NSPLIT,
// 5 MINC, 6 BKV, 7 RB (the attention's: its workgroups' rows are 16 RB).
#define NO_WG_REDUCE
#include "common.glsl"
#include "attn_rows_split.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint D = 4;
layout(constant_id = 3) const uint T = 16;
layout(constant_id = 4) const uint NSPLIT = 1;
layout(constant_id = 5) const uint MINC = 16;
layout(constant_id = 6) const uint BKV = 16;
layout(constant_id = 7) const uint RB = 1;
layout(binding = 0) readonly buffer PB { float part[]; };
layout(binding = 0) readonly buffer PB4 { vec4 part4[]; };
layout(binding = 1) writeonly buffer OB { vec4 o4[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= T * H * (D / 4)) return;
    const uint t = i / (H * (D / 4)), h = (i / (D / 4)) % H, j = 4 * (i % (D / 4));
    const uint pos = step[STEP_POS];
    const uint cut = rows_split_keys(pos, T, NSPLIT, MINC, BKV);
    if (pos + (t / (16 * RB) + 1) * 16 * RB <= cut) return;
    const uint live = (pos + t) / cut + 1u;
    float mx = NEG_INF;
    for (uint z = 0; z < live; z++) mx = max(mx, part[ROWS_PART_ML(z, t, h, T, H, D, NSPLIT)]);
    float l = 0.0;
    vec4 a = vec4(0.0);
    for (uint z = 0; z < live; z++) {
        const uint at = ROWS_PART_ML(z, t, h, T, H, D, NSPLIT);
        const float w = exp(part[at] - mx);
        l += w * part[at + 1u];
        a += w * part4[(ROWS_PART_O(z, t, h, T, H, D) + j) / 4];
    }
    o4[(ROWS_PART_O(0, t, h, T, H, D) + j) / 4] = a / l;
}

#version 450
#extension GL_GOOGLE_include_directive : require
// Combines attention's split-K partials (attn_partials.glsl) into o. One workgroup per head; used
// where no consumer combines them as it loads (replay-nofuse, unfused, a fallback o-projection).
// Reads only the splits live at the step's position (attn_live_splits, as the attention computed).
// Bindings: 0 partials, 1 o, 2 step. Spec: 0 wg size, 1 H, 2 D, 3 S, 4 MAXCHUNK, 5 MIN_S, 6 WINDOW
// (the attention's grid).
#define NO_WG_REDUCE
#include "common.glsl"
#include "attn_partials.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint D = 1;
layout(constant_id = 3) const uint S = 1;
layout(constant_id = 4) const uint MAXCHUNK = 1;
layout(constant_id = 5) const uint MIN_S = 1;
layout(constant_id = 6) const uint WINDOW = 0;
layout(binding = 0) readonly buffer PB { float p[]; };
layout(binding = 1) writeonly buffer OB { float o[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };

void main() {
    const uint h = gl_WorkGroupID.x;
    const uint live = attn_live_splits(step[STEP_POS], WINDOW, S, MAXCHUNK, MIN_S);
    float mx = NEG_INF;
    for (uint s = 0; s < live; s++)
        if (p[PART_ML(s, h, H, D, S) + 1] > 0.0) mx = max(mx, p[PART_ML(s, h, H, D, S)]);
    float l = 0.0;
    for (uint s = 0; s < live; s++) {
        float ls = p[PART_ML(s, h, H, D, S) + 1];
        if (ls > 0.0) l += exp(p[PART_ML(s, h, H, D, S)] - mx) * ls;
    }
    for (uint j = gl_LocalInvocationID.x; j < D; j += gl_WorkGroupSize.x) {
        float acc = 0.0;
        for (uint s = 0; s < live; s++)
            if (p[PART_ML(s, h, H, D, S) + 1] > 0.0) acc += exp(p[PART_ML(s, h, H, D, S)] - mx) * p[PART_O(s, h, j, H, D)];
        o[h * D + j] = acc / l;
    }
}

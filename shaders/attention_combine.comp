#version 450
#extension GL_GOOGLE_include_directive : require
// Combines attention's split-K partials (attn_partials.glsl) into o. One workgroup per head; used
// where no consumer combines them as it loads (replay-nofuse, unfused, a fallback o-projection).
// Reads only the splits live at the step's position (attn_live_splits, as the attention computed).
// Bindings: 0 partials, 1 o, 2 step. Spec: 0 wg size, 1 H, 2 D, 3 S, 4 MAXCHUNK, 5 MIN_S, 6 WINDOW
// (the attention's grid). Define CB: splits loaded per batch (at most S).
//
// Latency: the (m, l) pairs and the o elements of the first CB splits do not depend on the step
// word, so they are loaded together with it: one memory round trip where loading the step, then
// (m, l), then o (whose load waited on l > 0) took three. The splits past the live count are
// loaded too but never used (they hold a longer step's partials). Later batches (more than CB live
// splits) rescale the running sums by e^(M_old - M_new), as matmul_add.comp's CX_COMBINE does;
// with one batch the sums are those of the unbatched formula, in the same order.
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
layout(binding = 0) readonly buffer PB2 { vec2 p2[]; };   // (m, l) pairs: PART_ML is even
layout(binding = 1) writeonly buffer OB { float o[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };
#ifndef CB
#define CB 1
#endif

// splits s0 .. s0 + CB - 1 (clamped into the grid: past S re-reads split S - 1, never used)
void load_batch(uint s0, uint h, uint j, out vec2 ml[CB], out float po[CB]) {
    for (uint b = 0u; b < CB; b++) {
        const uint s = min(s0 + b, S - 1u);
        ml[b] = p2[PART_ML(s, h, H, D, S) / 2u];
        po[b] = p[PART_O(s, h, j, H, D)];
    }
}

void main() {
    const uint h = gl_WorkGroupID.x;
    for (uint j = gl_LocalInvocationID.x; j < D; j += gl_WorkGroupSize.x) {
        vec2 ml[CB];
        float po[CB];
        load_batch(0u, h, j, ml, po);
        const uint live = attn_live_splits(step[STEP_POS], WINDOW, S, MAXCHUNK, MIN_S);
        float mx = NEG_INF, l = 0.0, a = 0.0;
        for (uint s0 = 0u; s0 < live; s0 += CB) {
            if (s0 > 0u) load_batch(s0, h, j, ml, po);
            float bm = mx;
            for (uint b = 0u; b < CB; b++)
                if (s0 + b < live && ml[b].y > 0.0) bm = max(bm, ml[b].x);
            const float keep = mx == NEG_INF ? 0.0 : exp(mx - bm);   // l, a are 0 while mx is -inf
            l *= keep;
            a *= keep;
            for (uint b = 0u; b < CB; b++) {
                if (s0 + b < live && ml[b].y > 0.0) {
                    const float w = exp(ml[b].x - bm);
                    l += w * ml[b].y;
                    a += w * po[b];
                }
            }
            mx = bm;
        }
        o[h * D + j] = a / l;
    }
}

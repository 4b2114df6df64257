#version 450
#extension GL_GOOGLE_include_directive : require
// argmax in two passes, ties to the lowest index (numpy's argmax).
// Pass 1 (default): workgroup g scans logits [g*CHUNK, min(N, (g+1)*CHUNK)) and writes the pair
//   (max as float bits, its index). Bindings: 0 logits, 1 pairs. Spec: 0 wg size, 1 N, 2 CHUNK.
// Pass 2 (FINAL): one workgroup reduces the N pairs and writes the token id (u32).
//   Bindings: 0 pairs, 1 token. Spec: 0 wg size, 1 N (number of pairs); with ADVANCE (below)
//   also 2 step, 3 ring, spec 3 ring length.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const uint CHUNK = 1;

#ifdef FINAL
layout(binding = 0) readonly buffer PB { uvec2 pin[]; };
layout(binding = 1) writeonly buffer TB { uint token[]; };
#ifdef ADVANCE
// and the step's hand-off (advance_step.comp's work, here to save its dispatch): the token goes
// to the next step (step.token, step.pos + 1) and to the host's ring. Bindings 2 step, 3 ring.
layout(constant_id = 3) const uint RING = 64;
layout(binding = 2) buffer SB { uint step_buf[]; };
layout(binding = 3) writeonly buffer RB { uint ring[]; };
#include "attn_live.glsl"   // GRID_ARGS (binding 4): the next step's attention grids, as advance_step
#endif
#else
layout(binding = 0) readonly buffer LB { float logits[]; };
layout(binding = 1) writeonly buffer PB { uvec2 pout[]; };
#endif

shared float red_v[gl_WorkGroupSize.x];
shared uint red_i[gl_WorkGroupSize.x];

bool better(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint t = gl_LocalInvocationID.x;
    float bv = NEG_INF;
    uint bi = 0xFFFFFFFFu;
#ifdef FINAL
    for (uint k = t; k < N; k += WG) {
        float v = uintBitsToFloat(pin[k].x);
        if (better(v, pin[k].y, bv, bi)) { bv = v; bi = pin[k].y; }
    }
#else
    uint g = flat_group_id();
    uint end = min(N, (g + 1) * CHUNK);
    for (uint k = g * CHUNK + t; k < end; k += WG) {
        float v = logits[k];
        if (better(v, k, bv, bi)) { bv = v; bi = k; }
    }
#endif

#ifdef USE_SUBGROUP
    float sv = subgroupMax(bv);
    uint si = subgroupMin(bv == sv ? bi : 0xFFFFFFFFu);
    if (subgroupElect()) { red_v[gl_SubgroupID] = sv; red_i[gl_SubgroupID] = si; }
    barrier();
    if (t == 0) {
        for (uint k = 1; k < gl_NumSubgroups; k++)
            if (better(red_v[k], red_i[k], sv, si)) { sv = red_v[k]; si = red_i[k]; }
#else
    red_v[t] = bv;
    red_i[t] = bi;
    barrier();
    for (uint h = WG / 2; h > 0; h >>= 1) {
        if (t < h && better(red_v[t + h], red_i[t + h], red_v[t], red_i[t])) {
            red_v[t] = red_v[t + h];
            red_i[t] = red_i[t + h];
        }
        barrier();
    }
    if (t == 0) {
        float sv = red_v[0];
        uint si = red_i[0];
#endif
#ifdef FINAL
        token[0] = si;
#ifdef ADVANCE
        const uint pos = step_buf[STEP_POS];
        ring[pos % RING] = si;
        step_buf[STEP_TOKEN] = si;
        step_buf[STEP_POS] = pos + 1u;
#ifdef GRID_ARGS
        grid_args_update(pos + 1u);
#endif
#endif
#else
        pout[g] = uvec2(floatBitsToUint(sv), si);
#endif
    }
}

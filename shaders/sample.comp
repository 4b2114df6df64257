#version 450
#extension GL_GOOGLE_include_directive : require
// sample: the next token from the logits, in one workgroup (fusion/ir.py's `sample` semantics;
// vkdecode/sampling.py is the numpy twin). Temperature, top-k, top-p and the seed are read from
// the step buffer and the RNG counter is the position, so the recorded step never changes.
// top-k and top-p thresholds are found by radix select on order-preserving uint keys (32 counting
// passes each), then Gumbel-max over the kept set draws exactly from the renormalised softmax.
// Bindings: 0 logits, 1 step, 2 token. Spec: 0 workgroup size, 1 N (vocab).
// BATCH (fusion/chunk_batch.py): workgroup b samples row b of the logits with the parameters and
// position of its own record of the batch step buffer, into token[b].
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;

layout(binding = 0) readonly buffer LB { float logits[]; };
layout(binding = 1) readonly buffer SB { uint step_buf[]; };
layout(binding = 2) writeonly buffer OB { uint token[]; };

#define STEP_TEMP 3
#define STEP_TOP_K 4
#define STEP_TOP_P 5
#ifdef BATCH
#define ROW gl_WorkGroupID.x
#define LG(i) logits[ROW * N + (i)]
#define SW(w) step_buf[ROW * STEP_WORDS + (w)]
#else
#define ROW 0
#define LG(i) logits[i]
#define SW(w) step_buf[w]
#endif

shared float red_v[gl_WorkGroupSize.x];
shared uint red_i[gl_WorkGroupSize.x];

uint okey(float f) {
    uint u = floatBitsToUint(f);
    return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

uint hash32(uint x) {
    x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
    return x;
}

// (value, index) argmax over the workgroup, ties to the lowest index (numpy's argmax).
uint wg_argmax(float v, uint i) {
    uint t = gl_LocalInvocationID.x;
    red_v[t] = v; red_i[t] = i;
    barrier();
    for (uint h = gl_WorkGroupSize.x / 2; h > 0; h >>= 1) {
        if (t < h) {
            float ov = red_v[t + h]; uint oi = red_i[t + h];
            if (ov > red_v[t] || (ov == red_v[t] && oi < red_i[t])) { red_v[t] = ov; red_i[t] = oi; }
        }
        barrier();
    }
    uint r = red_i[0];
    barrier();
    return r;
}

void main() {
    const uint t = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    const float temp = uintBitsToFloat(SW(STEP_TEMP));
    float best = NEG_INF; uint bi = N;
    if (!(temp > 0.0)) {
        for (uint i = t; i < N; i += WG) if (LG(i) > best) { best = LG(i); bi = i; }
        uint r = wg_argmax(best, bi);
        if (t == 0) token[ROW] = r;
        return;
    }
    const uint top_k = SW(STEP_TOP_K);
    const float top_p = uintBitsToFloat(SW(STEP_TOP_P));
    uint th = 0u;                       // keep keys >= th
    if (top_k > 0u && top_k < N) {      // the largest th with count(key >= th) >= top_k
        for (int b = 31; b >= 0; b--) {
            uint cand = th | (1u << uint(b));
            float c = 0.0;
            for (uint i = t; i < N; i += WG) c += okey(LG(i)) >= cand ? 1.0 : 0.0;
            if (wg_sum(c) >= float(top_k)) th = cand;
        }
    }
    if (top_p < 1.0) {                  // the largest th2 whose kept mass still reaches top_p
        float m = NEG_INF;
        for (uint i = t; i < N; i += WG) m = max(m, LG(i));
        m = wg_max(m);
        float z = 0.0;
        for (uint i = t; i < N; i += WG) if (okey(LG(i)) >= th) z += exp((LG(i) - m) / temp);
        const float need = top_p * wg_sum(z);
        uint th2 = 0u;                  // radix select from 0: mass(max(x, th)) falls as x grows
        for (int b = 31; b >= 0; b--) {
            uint cand = max(th2 | (1u << uint(b)), th);
            float s = 0.0;
            for (uint i = t; i < N; i += WG) if (okey(LG(i)) >= cand) s += exp((LG(i) - m) / temp);
            if (wg_sum(s) >= need) th2 = th2 | (1u << uint(b));
        }
        th = max(th, th2);
    }
    const uint base = hash32(hash32(SW(STEP_SEED)) ^ SW(STEP_POS));
    for (uint i = t; i < N; i += WG) {
        if (okey(LG(i)) < th) continue;
        float u = (float(hash32(base ^ i) >> 8) + 0.5) * (1.0 / 16777216.0);
        float s = LG(i) / temp - log(-log(u));
        if (s > best) { best = s; bi = i; }
    }
    uint r = wg_argmax(best, bi);
    if (t == 0) token[ROW] = r;
}

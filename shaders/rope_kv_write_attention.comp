#version 450
#extension GL_GOOGLE_include_directive : require
// (QK_NORM_)ROPE_KV_WRITE_ATTENTION in one dispatch on attention.comp's fixed split-K grid
// (workgroup (s, h): rows [s*c, min(len, (s+1)*c)), c = ceil(len / S), len = pos + 1):
//   every workgroup builds rope(q_h) (QK_NORM: of the per-head rms-normed q_h) and its kv head's
//   current k (normed, roped) and v in shared memory itself; the workgroup (0, first q head of the
//   kv group) writes that k, v as row pos of the caches; attention reads cache rows < pos, written
//   by earlier steps, and takes row pos from its own shared copy. No workgroup reads what another
//   writes in this dispatch, so no barrier and no race. SPLIT writes attention.comp's partials for
//   attention_combine; without it (S == 1) o directly. Sums run in attention.comp's order.
// Bindings: 0 q, 1 k, 2 v, 3 step, 4 k_cache, 5 v_cache, 6 o (or partials [H][S][D + 2]),
//   QK_NORM: 7 q_norm_w[D], 8 k_norm_w[D].
// Spec: 0 wg size, 1 H, 2 KVH, 3 D, 4 S, 5 MAXCHUNK, 6 scale, 7 theta, 8 eps (QK_NORM).
#include "common.glsl"

layout(constant_id = 1) const uint H = 1;
layout(constant_id = 2) const uint KVH = 1;
layout(constant_id = 3) const uint D = 2;
layout(constant_id = 4) const uint S = 1;
layout(constant_id = 5) const uint MAXCHUNK = 1;
layout(constant_id = 6) const float SCALE = 1.0;
layout(constant_id = 7) const float THETA = 10000.0;
layout(constant_id = 8) const float EPS = 1e-6;
const uint RG = gl_WorkGroupSize.x >= D ? gl_WorkGroupSize.x / D : 1;

layout(binding = 0) readonly buffer QB { float q[]; };
layout(binding = 1) readonly buffer KB { float k[]; };
layout(binding = 2) readonly buffer VB { float v[]; };
layout(binding = 3) readonly buffer StepB { uint step[]; };
layout(binding = 4) buffer KCB { float kc[]; };
layout(binding = 4) readonly buffer KC4 { vec4 kc4[]; };
layout(binding = 5) buffer VCB { float vc[]; };
layout(binding = 6) writeonly buffer OB { float o[]; };
#ifdef QK_NORM
layout(binding = 7) readonly buffer QNB { float qnw[]; };
layout(binding = 8) readonly buffer KNB { float knw[]; };
#endif

#include "fused_rope.glsl"

shared float qs[D];
shared float ks[D];
shared float vs[D];
shared float sc[MAXCHUNK];
shared float part[RG * D];

// q . k of a cache row (at word base) or, when current, of the k in shared memory; the same
// summation order either way (vec4 dots when KVEC), as attention.comp.
float score(uint base, bool current) {
    float a = 0.0;
#ifdef KVEC
    for (uint j = 0; j < D; j += 4) {
        vec4 kv = current ? vec4(ks[j], ks[j + 1], ks[j + 2], ks[j + 3]) : kc4[(base + j) / 4];
        a += dot(vec4(qs[j], qs[j + 1], qs[j + 2], qs[j + 3]), kv);
    }
#else
    for (uint j = 0; j < D; j++) a += qs[j] * (current ? ks[j] : kc[base + j]);
#endif
    return a;
}

void main() {
    const uint WG = gl_WorkGroupSize.x;
    const uint t = gl_LocalInvocationID.x;
    const uint s = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    const uint ROW = KVH * D;
    const uint kvh = h / (H / KVH), kvoff = kvh * D;
    const uint pos = step[STEP_POS];
    const uint len = pos + 1;
    const uint chunk = (len + S - 1) / S;
    const uint r0 = min(s * chunk, len);
    const uint n = min(len - r0, chunk);
    const bool cur = n > 0 && r0 + n == len;  // this split ends with row pos: from shared memory
    const uint nc = cur ? n - 1 : n;           // rows read from the caches

    // q_h, k and v of the current token (per-head rms norm first with QK_NORM)
#ifdef QK_NORM
    float sq = 0.0, sk = 0.0;
    for (uint j = t; j < D; j += WG) {
        float a = q[h * D + j], b = k[kvoff + j];
        sq += a * a;
        sk += b * b;
    }
    const float rq = inversesqrt(wg_sum(sq) / float(D) + EPS);
    const float rk = inversesqrt(wg_sum(sk) / float(D) + EPS);
#endif
    for (uint j = t; j < D; j += WG) {
#ifdef QK_NORM
        qs[j] = q[h * D + j] * rq * qnw[j];
        ks[j] = k[kvoff + j] * rk * knw[j];
#else
        qs[j] = q[h * D + j];
        ks[j] = k[kvoff + j];
#endif
        vs[j] = v[kvoff + j];
    }
    barrier();
    for (uint i = t; i < D / 2; i += WG) {  // one invocation per pair: rotates in place
        const vec2 cs = rope_cos_sin(pos, i);
        const uvec2 ab = rope_pair(i);
        float a = qs[ab.x], b = qs[ab.y];
        qs[ab.x] = (a * cs.x - b * cs.y) * SCALE;
        qs[ab.y] = (a * cs.y + b * cs.x) * SCALE;
        a = ks[ab.x];
        b = ks[ab.y];
        ks[ab.x] = a * cs.x - b * cs.y;
        ks[ab.y] = a * cs.y + b * cs.x;
    }
    barrier();
    if (s == 0 && h % (H / KVH) == 0) {
        for (uint j = t; j < D; j += WG) {
            kc[pos * ROW + kvoff + j] = ks[j];
            vc[pos * ROW + kvoff + j] = vs[j];
        }
    }

    float m = NEG_INF;
    for (uint i = t; i < n; i += WG) {
        float a = score((r0 + i) * ROW + kvoff, i >= nc);
        sc[i] = a;
        m = max(m, a);
    }
    m = wg_max(m);  // barrier inside: all scores are visible after it
    float l = 0.0;
    for (uint i = t; i < n; i += WG) {
        float p = exp(sc[i] - m);
        sc[i] = p;
        l += p;
    }
    l = wg_sum(l);

    for (uint idx = t; idx < RG * D; idx += WG) {
        uint j = idx % D, g = idx / D;
        float acc = 0.0;
        for (uint i = g; i < nc; i += RG) acc += sc[i] * vc[(r0 + i) * ROW + kvoff + j];
        if (cur && g == nc % RG) acc += sc[nc] * vs[j];  // last in the order attention.comp sums
        part[idx] = acc;
    }
    barrier();
    for (uint j = t; j < D; j += WG) {
        float acc = 0.0;
        for (uint g = 0; g < RG; g++) acc += part[g * D + j];
#ifdef SPLIT
        uint pb = (h * S + s) * (D + 2);
        o[pb + j] = acc;
        if (j == 0) {
            o[pb + D] = m;
            o[pb + D + 1] = l;  // 0 for an empty chunk: the combine pass skips it
        }
#else
        o[h * D + j] = acc / l;
#endif
    }
}

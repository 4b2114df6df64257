// GATED_NORM (matmul_add.comp; fusion rule RMS_NORM_SILU_MUL_MATMUL_ADD, Qwen3.5's linear-attention
// output): the matvec's x is silu(z) * (o / rms_head(o) * norm_w), the norm over each D-element head
// of o (bound at B_X) with the one D-element weight, so the per-head rms_norm and the silu_mul gate
// need no dispatch of their own. The whole-vector norm of RMS_NORM_MATMUL factors out of the dot
// (fused_matvec.glsl); a norm per head does not, so every workgroup first takes the HEADS heads'
// 1 / rms into shared memory (gn_norms: a few KB of o, read from L2 by each), then X1 / X4 build x as
// the two ops' kernels do: rms_norm.comp's o * r * w, then silu_mul.comp's z / (1 + exp(-z)) * that.
// Bindings after y: B_Z z, B_GW norm_w. Spec 4 D, 5 HEADS (K / D), 6 LANES (invocations summing
// one head's squares), 7 EPS.
layout(constant_id = 4) const uint D = 1;
layout(constant_id = 5) const uint HEADS = 1;
layout(constant_id = 6) const uint LANES = 1;
layout(constant_id = 7) const float EPS = 1e-6;
layout(binding = B_Z) readonly buffer GZ1 { float gz1[]; };
layout(binding = B_Z) readonly buffer GZ4 { vec4 gz4[]; };
layout(binding = B_GW) readonly buffer GW1 { float gw1[]; };
layout(binding = B_GW) readonly buffer GW4 { vec4 gw4[]; };
shared float gn_part[HEADS * LANES];  // each lane's part of its head's sum of squares
shared float gn_inv[HEADS];           // 1 / rms of each head

// Lane l of head h sums the squares of its elements l, l + LANES, ... (vec4s where D is whole vec4s),
// then one invocation a head adds its LANES parts: two barriers, whatever HEADS and the workgroup.
// Call from uniform control flow, before the matvec.
void gn_norms() {
    const uint t = gl_LocalInvocationID.x;
    for (uint j = t; j < HEADS * LANES; j += gl_WorkGroupSize.x) {
        const uint h = j / LANES, l = j % LANES;
        float s = 0.0;
        if (D % 4u == 0u) {
            for (uint i = l; i < D / 4u; i += LANES) {
                const vec4 a = x4[h * (D / 4u) + i];
                s += dot(a, a);
            }
        } else {
            for (uint i = l; i < D; i += LANES) s += x1[h * D + i] * x1[h * D + i];
        }
        gn_part[j] = s;
    }
    barrier();
    for (uint h = t; h < HEADS; h += gl_WorkGroupSize.x) {
        float s = 0.0;
        for (uint l = 0u; l < LANES; l++) s += gn_part[h * LANES + l];
        gn_inv[h] = inversesqrt(s / float(D) + EPS);   // rms_norm.comp's r
    }
    barrier();
}

float gn_x1(uint i) {
    const float g = gz1[i];
    return g / (1.0 + exp(-g)) * (x1[i] * gn_inv[i / D] * gw1[i % D]);
}

vec4 gn_x4(uint i) {
    if (D % 4u != 0u) return vec4(gn_x1(4u * i), gn_x1(4u * i + 1u), gn_x1(4u * i + 2u), gn_x1(4u * i + 3u));
    const vec4 g = gz4[i];   // the four elements share a head
    return g / (1.0 + exp(-g)) * (x4[i] * gn_inv[4u * i / D] * gw4[i % (D / 4u)]);
}
#define X1(i) gn_x1(i)
#define X4(i) gn_x4(i)

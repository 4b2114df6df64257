// Core of the fused matvec kernels (rms_norm_matmul*, matmul_silu_mul): spec constants, the
// activation fetch (optionally RMS-normalised on the fly) and a workgroup reduction of FMV_NR
// floats. Include after common.glsl (with NO_WG_REDUCE) and before the fused_wslot.glsl slots.
//
// With NORM the matvec runs on x * norm_w and the caller scales each dot by
// rsqrt(mean(x^2) + eps): y = W (x / rms(x) * w) = rms(x)^-1 * W (x * w). sum(x^2) is gathered
// while the dot loop loads x (each element exactly once per row block), and reduced together with
// the dots, so the norm costs neither a dispatch nor an extra reduction.
// Includer defines B_X (x binding), B_NW (norm weight, with NORM) and optionally FMV_NR (floats
// per reduction, default ROWS + 1: ROWS dots and the sum of squares).
// Spec: 0 workgroup size (common.glsl), 1 K (in-dim), 2 ROWS (rows per block), 3 EPS.

layout(constant_id = 1) const uint K = 32;
layout(constant_id = 2) const uint ROWS = 1;
layout(constant_id = 3) const float EPS = 1e-6;
#ifndef FMV_NR
#define FMV_NR (ROWS + 1)
#endif

layout(binding = B_X) readonly buffer FX1 { float fx1[]; };
layout(binding = B_X) readonly buffer FX4 { vec4 fx4[]; };
float fmv_ss = 0.0;  // this invocation's part of sum(x^2) since the last reset
// The invocation's accumulators (dots, then the sum of squares). A global, not a parameter: an
// array sized by a spec-constant expression gets a new type at every declaration in SPIR-V.
float fmv_acc[FMV_NR];
#if defined(NORM) && defined(NORM_PRE)
// NORM_PRE (vkdecode/lowering/norm_pre.py): the matmul_add before wrote x * norm_w (bound at B_X)
// and N_PARTS partial sums of x^2 (bound at B_NW instead of norm_w): one load per x element and
// no squares here; fmv_norm_parts gathers the partials into fmv_ss (below: before or after the
// weight loop).
layout(binding = B_NW) readonly buffer FNP { float fn_part[]; };
layout(binding = B_NW) readonly buffer FNP4 { vec4 fn_part4[]; };
#define X4(i) fx4[i]
#define X1(i) fx1[i]
#elif defined(NORM)
layout(binding = B_NW) readonly buffer FN1 { float fn1[]; };
layout(binding = B_NW) readonly buffer FN4 { vec4 fn4[]; };
vec4 fmv_x4(uint i) { vec4 a = fx4[i]; fmv_ss += dot(a, a); return a * fn4[i]; }
float fmv_x1(uint i) { float a = fx1[i]; fmv_ss += a * a; return a * fn1[i]; }
#define X4(i) fmv_x4(i)
#define X1(i) fmv_x1(i)
#else
#define X4(i) fx4[i]
#define X1(i) fx1[i]
#endif

shared float fmv_red[FMV_NR * gl_WorkGroupSize.x];

// Sums fmv_acc over the workgroup; fmv_total(i) then gives total i to any invocation. Only the
// invocations that use a total gather it: with 16 subgroups (lavapipe) every invocation summing
// every total made this reduction cost more than the dot products. Contains barriers: call from
// uniform control flow.
void fmv_reduce() {
    const uint WG = gl_WorkGroupSize.x;
#ifdef USE_SUBGROUP
    for (uint i = 0; i < FMV_NR; i++) fmv_acc[i] = subgroupAdd(fmv_acc[i]);
    if (gl_NumSubgroups == 1) return;
    barrier();  // fmv_red may still be read by a previous call
    if (subgroupElect())
        for (uint i = 0; i < FMV_NR; i++) fmv_red[i * WG + gl_SubgroupID] = fmv_acc[i];
    barrier();
#else
    const uint t = gl_LocalInvocationID.x;
    barrier();
    for (uint i = 0; i < FMV_NR; i++) fmv_red[i * WG + t] = fmv_acc[i];
    barrier();
    for (uint h = WG / 2; h > 0; h >>= 1) {
        if (t < h)
            for (uint i = 0; i < FMV_NR; i++) fmv_red[i * WG + t] += fmv_red[i * WG + t + h];
        barrier();
    }
#endif
}

// fmv_acc[i] without dynamic indexing of a private array (keeps it in registers)
float fmv_pick(uint i) {
    float r = fmv_acc[0];
    for (uint k = 1; k < FMV_NR; k++) if (k == i) r = fmv_acc[k];
    return r;
}

// Total i after fmv_reduce(); every invocation that asks sums in the same order (same bits).
float fmv_total(uint i) {
#ifdef USE_SUBGROUP
    if (gl_NumSubgroups == 1) return fmv_pick(i);  // subgroupAdd left the totals everywhere
    float s = 0.0;
    for (uint k = 0; k < gl_NumSubgroups; k++) s += fmv_red[i * gl_WorkGroupSize.x + k];
    return s;
#else
    return fmv_red[i * gl_WorkGroupSize.x];
#endif
}

// NORM_PRE: the producer's partial sums of x^2 into fmv_ss, from fmv_clear, or with NORM_PRE_LATE
// from fmv_ss_total after the weight loop, so they take no registers while the weight loads are in
// flight (the K-quant consumers: vkdecode/lowering/norm_pre.py late_parts)
void fmv_norm_parts() {
#if defined(NORM) && defined(NORM_PRE)
    // 16-byte loads: every workgroup reads all N_PARTS, so the load count matters (H100, Llama-3.1-8B
    // Q4_K_M step 3652 vs 3736 µs with a float a load; bench/results/nvidia-h100-80gb-hbm3/2026-11-25-norm-parts/)
    for (uint p = gl_LocalInvocationID.x; p < N_PARTS / 4; p += gl_WorkGroupSize.x) {
        const vec4 a = fn_part4[p];
        fmv_ss += (a.x + a.y) + (a.z + a.w);
    }
    for (uint p = N_PARTS / 4 * 4 + gl_LocalInvocationID.x; p < N_PARTS; p += gl_WorkGroupSize.x) fmv_ss += fn_part[p];
#endif
}

void fmv_clear() {
    for (uint i = 0; i < FMV_NR; i++) fmv_acc[i] = 0.0;
    fmv_ss = 0.0;
#ifndef NORM_PRE_LATE
    fmv_norm_parts();
#endif
}

// this invocation's share of sum(x^2), for its accumulator after the weight loop
float fmv_ss_total() {
#ifdef NORM_PRE_LATE
    fmv_norm_parts();
#endif
    return fmv_ss;
}

// 1 / rms of x from the reduced sum of squares
float fmv_inv_rms(float ss) {
#ifdef NORM
    return inversesqrt(ss / float(K) + EPS);
#else
    return 1.0;
#endif
}

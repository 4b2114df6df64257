// The body of a matvec loop step over wide q4_k / q6_k unit u (dequant.glsl KW_SPLIT), included
// inside the loops of matvec.glsl, fused_wslot.glsl and fused_swiglu.glsl so all take the same
// code: KW_ACC(i) += row first + i's dot with x over unit u, for i < ROWS (rows past KW_M - 1
// re-read row KW_M - 1; their sums are dropped by the caller). With KW_PAIR (gate/up) the rows
// are those of weight slots 0 and 1 (fused_wslot.glsl), the second's in KW_ACC(ROWS + i).
// Optional: KW_BASE, a row offset added to every row read (the chosen expert's first row in a 3-D
// MoE weight: matvec.glsl's MV_ROW_BASE, fused_swiglu.glsl's FSW_BASE; default 0), and KW_WEIGHT,
// a factor on every unit's dot (matvec.glsl's MV_SLOT_WEIGHT, the router weight of a MoE slot).
// KW_XROWS (matvec.glsl's MV_XROWS, a batched decode step): the rows' words are loaded once, then
// dotted with each of KW_XROWS rows of x in turn: KW_XROW(kw_b) selects x row kw_b for kw_x (the
// includer's X4) and KW_ACC(i) names row i's accumulator of x row kw_b. Without it (one x row)
// the code is that of the single-row matvec. H200, Llama-3.1-8B Q4_K_M batched step in 8-weight
// units, the weights decoded again for every x row: 3 ms for 1 row, 7 for 2, 10 for 4, 21 for 8.
// KW_XP(g, p, inv, xs) (matmul.comp KW_XPLANES, with KW_IDOT): loads the planes, 2^-s and sum of
// x's 16-element group g (of the row KW_XROW chose), made once a step (lowering/xplanes.py), in
// place of kw_x + kw_xsum + kw_planes in every workgroup.
//
// Every row's weight words are loaded first, then x in two halves (the low nibbles' 16
// activations, then the high ones'), so only half of the unit's x is live with them: H100, q4_k
// 14336x4096 24.2 vs 26.6 µs, 28672x4096 39.9 vs 44.5 (4 rows a workgroup of 64 against the
// unsplit unit's best, 2), bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kwide-split/.
{
#ifndef KW_BASE
#define KW_BASE 0u
#define KW_BASE_OWN
#endif
#ifdef KW_WEIGHT
#define KW_TERM(v) (KW_WEIGHT * (v))
#else
#define KW_TERM(v) (v)
#endif
#ifdef KW_PAIR
#define KW_N (2 * ROWS)
#else
#define KW_N ROWS
#endif
    uvec4 kq[KW_N], kaux[KW_N];
    for (uint i = 0; i < ROWS; i++) {
        const uint r = min(first + i, KW_M - 1) + KW_BASE;
#ifdef KW_PAIR
        kw_load_0(r * ROW_WORDS(K), r * ROW_SCALES(K), u, kq[i], kaux[i]);
        kw_load_1(r * ROW_WORDS(K), r * ROW_SCALES(K), u, kq[ROWS + i], kaux[ROWS + i]);
#else
        kw_load(r * ROW_WORDS(K), r * ROW_SCALES(K), u, kq[i], kaux[i]);
#endif
    }
#ifdef KW_XROWS
    for (uint kw_b = 0; kw_b < KW_XROWS; kw_b++) {
    KW_XROW(kw_b);
#endif
    float ka0[KW_N];
#ifdef KW_XP
#ifndef KW_IDOT
#error "KW_XP: x planes are read only where split units take integer dot products (KQ_IDOT)"
#endif
    // x's halves as the byte planes, factor and sum xplanes.comp made once a step (the group of
    // 16 activations of half h is vec4s kq_xv(4u) + h KQ_XHI.. of x)
    uvec4 kp[KQ_PLANES];
    float kinv, kxs0, kxs1;
    KW_XP(kq_xv(4 * u) / 4, kp, kinv, kxs0);
#define KW_XH kp, kinv
    for (uint i = 0; i < KW_N; i++) ka0[i] = kw_half(kq[i], kaux[i], 0u, KW_XH);
    KW_XP((kq_xv(4 * u) + KQ_XHI) / 4, kp, kinv, kxs1);
#else
    vec4 kx[4];
    kw_x(u, 0u, kx);
    const float kxs0 = kw_xsum(kx);
#ifdef KW_IDOT
    // x's half as byte planes, once for all the rows (dequant.glsl KQ_IDOT)
    uvec4 kp[KQ_PLANES];
    float kinv = kw_planes(kx, kp);
#define KW_XH kp, kinv
#else
#define KW_XH kx
#endif
    for (uint i = 0; i < KW_N; i++) ka0[i] = kw_half(kq[i], kaux[i], 0u, KW_XH);
    kw_x(u, 1u, kx);
    const float kxs1 = kw_xsum(kx);
#ifdef KW_IDOT
    kinv = kw_planes(kx, kp);
#endif
#endif
    for (uint i = 0; i < ROWS; i++) {
        const uint rs = (min(first + i, KW_M - 1) + KW_BASE) * ROW_SCALES(K);
#ifdef KW_PAIR
        KW_ACC(i) += KW_TERM(kw_scaled_0(rs, kaux[i], u, ka0[i], kw_half(kq[i], kaux[i], 1u, KW_XH), kxs0, kxs1));
        KW_ACC(ROWS + i) += KW_TERM(kw_scaled_1(rs, kaux[ROWS + i], u, ka0[ROWS + i],
                                                kw_half(kq[ROWS + i], kaux[ROWS + i], 1u, KW_XH), kxs0, kxs1));
#else
        KW_ACC(i) += KW_TERM(kw_scaled(rs, kaux[i], u, ka0[i], kw_half(kq[i], kaux[i], 1u, KW_XH), kxs0, kxs1));
#endif
    }
#ifdef KW_XROWS
    }
#endif
#undef KW_N
#undef KW_XH
#undef KW_TERM
#ifdef KW_BASE_OWN
#undef KW_BASE
#undef KW_BASE_OWN
#endif
}

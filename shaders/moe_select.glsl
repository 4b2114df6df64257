// The router's softmax and top-k selection, shared by moe_topk.comp and
// rms_norm_matmul_moe_topk.comp. Needs common.glsl's wg_max / wg_sum, spec constants E and TOPK,
// and the includer's `ids` / `weights` buffers. The includer writes the row's logits to moe_p
// (then moe_softmax_pick's first barrier makes them visible); moe_store writes ids and weights.
// The selection is TOPK workgroup-wide argmax passes (each invocation scans its experts, then two
// reductions: the largest p, the lowest index holding it); the softmax is spread the same way.
// One invocation's k * E scan (1024 dependent shared reads for 128 experts, k = 8) took ~30 us of
// a Qwen3-30B-A3B layer on the H200.

shared float moe_p[E];
shared uint moe_ids_s[TOPK];
shared float moe_w_s[TOPK];

// TOPK passes over moe_p, strictly greater wins (ties: the lower index); a taken expert is marked
// below every p (all p >= 0). Uniform control flow: every invocation takes part.
void moe_pick() {
    const uint t = gl_LocalInvocationID.x;
    float total = 0.0;
    for (uint j = 0; j < TOPK; j++) {
        uint best = E;
        float bv = -1.0;
        for (uint e = t; e < E; e += gl_WorkGroupSize.x)
            if (moe_p[e] > bv) { bv = moe_p[e]; best = e; }
        const float m = wg_max(bv);
        // E - index as a float (exact: E is small): the largest is the lowest index holding m
        const uint win = E - uint(wg_max(bv == m ? float(E - best) : 0.0));
        total += m;
        barrier();  // every scan of moe_p is done before the winner is marked
        if (t == 0u) {
            moe_ids_s[j] = win;
            moe_w_s[j] = m;
            moe_p[win] = -2.0;
        }
        barrier();
    }
#ifdef NORM
    if (t == 0u)
        for (uint j = 0; j < TOPK; j++) moe_w_s[j] /= total;
#endif
}

// Call from uniform control flow (barriers).
void moe_softmax_pick() {
    const uint t = gl_LocalInvocationID.x;
    barrier();
    float mx = NEG_INF;
    for (uint e = t; e < E; e += gl_WorkGroupSize.x) mx = max(mx, moe_p[e]);
    mx = wg_max(mx);
    float s = 0.0;
    for (uint e = t; e < E; e += gl_WorkGroupSize.x) s += exp(moe_p[e] - mx);
    s = wg_sum(s);
    barrier();  // every invocation has read moe_p before it is overwritten
    for (uint e = t; e < E; e += gl_WorkGroupSize.x) moe_p[e] = exp(moe_p[e] - mx) / s;
    barrier();
    moe_pick();
    barrier();
}

void moe_store(uint row) {
    for (uint j = gl_LocalInvocationID.x; j < TOPK; j += gl_WorkGroupSize.x) {
        ids[row * TOPK + j] = moe_ids_s[j];
        weights[row * TOPK + j] = moe_w_s[j];
    }
}

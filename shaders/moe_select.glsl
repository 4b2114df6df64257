// The router's softmax and top-k selection, shared by moe_topk.comp and
// rms_norm_matmul_moe_topk.comp. Needs common.glsl's wg_max / wg_sum, spec constants E and TOPK,
// and the includer's `ids` / `weights` buffers. The includer writes the row's logits to moe_p
// (then moe_softmax_pick's first barrier makes them visible); moe_store writes ids and weights.
// E is at most a few hundred: the selection is TOPK passes of one invocation over the shared p
// (k * E steps: 1024 for 128 experts and k = 8); the softmax is spread over the workgroup.

shared float moe_p[E];
shared uint moe_ids_s[TOPK];
shared float moe_w_s[TOPK];

// TOPK passes over moe_p, strictly greater wins (ties: the lower index); a taken expert is marked
// below every p (all p >= 0).
void moe_pick() {
    float total = 0.0;
    for (uint j = 0; j < TOPK; j++) {
        uint best = 0u;
        float bv = -1.0;
        for (uint e = 0; e < E; e++)
            if (moe_p[e] > bv) { bv = moe_p[e]; best = e; }
        moe_ids_s[j] = best;
        moe_w_s[j] = bv;
        moe_p[best] = -2.0;
        total += bv;
    }
#ifdef NORM
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
    if (t == 0u) moe_pick();
    barrier();
}

void moe_store(uint row) {
    for (uint j = gl_LocalInvocationID.x; j < TOPK; j += gl_WorkGroupSize.x) {
        ids[row * TOPK + j] = moe_ids_s[j];
        weights[row * TOPK + j] = moe_w_s[j];
    }
}

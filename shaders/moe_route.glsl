// MOE_ROUTE (fused_swiglu.glsl, lowering/moe_route.py): the top-k of a decode step's router logits
// inside the chosen experts' gate/up kernel, so no dispatch of its own. Every workgroup picks the
// experts itself and takes the one of its slot's rank; workgroup 0 also writes every slot's id and
// router weight for the down projections after it. MOE_ROUTE_SG (a workgroup of one subgroup):
// TOPK argmax passes of two subgroup reductions each. Otherwise each invocation counts, for its
// experts, the logits above (E shared reads an expert): on the H200 that cost ~12 us a
// Qwen3-30B-A3B layer in 1,536 workgroups, more than the top-k's own dispatch.
// The order is moe_topk's (largest first, ties: the lower index), on the logits (softmax keeps
// their order); a weight is softmax(logits) at the expert, with MOE_NORM divided by the chosen
// ones' sum instead: exp(l - max) over the chosen only. Needs spec constants E and TOPK, bindings
// B_LOGITS, B_IDS and B_SW.
layout(binding = B_LOGITS) readonly buffer MRL { float moe_logits[]; };
layout(binding = B_IDS) writeonly buffer MRI { uint moe_ids_out[]; };
layout(binding = B_SW) writeonly buffer MRW { float moe_sw_out[]; };
shared float moe_l[E];
shared uint moe_rank_e[TOPK];
#ifdef MOE_ROUTE_SG
#ifndef USE_SUBGROUP
#error "MOE_ROUTE_SG: subgroup arithmetic (USE_SUBGROUP) and a workgroup of one subgroup"
#endif
shared float moe_rank_v[TOPK];
#endif

// The expert of rank `slot`; with `store`, every slot's id and weight written too. Contains
// barriers: call from uniform control flow.
uint moe_route(uint slot, bool store) {
    const uint t = gl_LocalInvocationID.x;
    for (uint e = t; e < E; e += gl_WorkGroupSize.x) moe_l[e] = moe_logits[e];
    barrier();
#ifdef MOE_ROUTE_SG
    for (uint j = 0; j < TOPK; j++) {
        float bv = NEG_INF;
        uint be = E;
        for (uint e = t; e < E; e += gl_WorkGroupSize.x)
            if (moe_l[e] > bv) { bv = moe_l[e]; be = e; }
        const float m = subgroupMax(bv);
        const uint win = subgroupMin(bv == m ? be : E);
        barrier();  // every scan of moe_l is done before the winner is marked
        if (t == 0u) { moe_rank_e[j] = win; moe_rank_v[j] = m; }
        if (be == win && win < E) moe_l[win] = NEG_INF;
        barrier();
    }
    if (store) {
        // exp(l - max) over all E (the chosen ones' were marked -inf: added back) or the chosen
        const float mx = moe_rank_v[0];
        float total = 0.0;
#ifndef MOE_NORM
        for (uint e = t; e < E; e += gl_WorkGroupSize.x) total += exp(moe_l[e] - mx);
        total = subgroupAdd(total);
#endif
        for (uint j = 0; j < TOPK; j++) total += exp(moe_rank_v[j] - mx);
        for (uint j = t; j < TOPK; j += gl_WorkGroupSize.x) {
            moe_ids_out[j] = min(moe_rank_e[j], E - 1u);
            moe_sw_out[j] = exp(moe_rank_v[j] - mx) / total;
        }
    }
#else
    for (uint e = t; e < E; e += gl_WorkGroupSize.x) {
        const float v = moe_l[e];
        uint rank = 0u;
        for (uint j = 0; j < E; j++) rank += uint(moe_l[j] > v || (moe_l[j] == v && j < e));
        if (rank < TOPK) moe_rank_e[rank] = e;
    }
    barrier();
    if (store && t == 0u) {
        // (a NaN logit ranks nowhere: its slots keep an old expert, clamped in range below)
        const float mx = moe_l[min(moe_rank_e[0], E - 1u)];
        float total = 0.0;
#ifdef MOE_NORM
        for (uint j = 0; j < TOPK; j++) total += exp(moe_l[min(moe_rank_e[j], E - 1u)] - mx);
#else
        for (uint e = 0; e < E; e++) total += exp(moe_l[e] - mx);
#endif
        for (uint j = 0; j < TOPK; j++) {
            const uint e = min(moe_rank_e[j], E - 1u);
            moe_ids_out[j] = e;
            moe_sw_out[j] = exp(moe_l[e] - mx) / total;
        }
    }
#endif
    return min(moe_rank_e[min(slot, TOPK - 1u)], E - 1u);
}

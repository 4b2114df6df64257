// Splits of a split-K attention grid that hold rows at position pos, and (GRID_ARGS) the indirect
// dispatch arguments that size each attention grid to them. Self-contained (advance_step.comp,
// which writes the next step's arguments, includes nothing else); vkdecode/kernels.py
// live_splits() is the host's copy of the same formula.
//
// The grid has S splits (sized for the whole context, at most MAXCHUNK rows each), but a step only
// uses as many as its rows need, at least MIN_S (which keeps small positions spread over a GPU):
// attention work and the partials a combine reads grow with the position, not with --ctx.
// Splits s >= this write nothing; readers must not read them (they hold a longer step's partials).
uint attn_live_splits(uint pos, uint window, uint S, uint maxchunk, uint min_s) {
    const uint len = pos + 1u;
    const uint rows = (window != 0u && len > window) ? window : len;
    return clamp((rows + maxchunk - 1u) / maxchunk, min(min_s, S), S);
}

#ifdef GRID_ARGS
// GRID_ARGS = binding of the grid records, GRID_N = their number. Record g (GRID_RECORD words at
// g * GRID_RECORD, vkdecode/executors/plan.py GridArgs): 0..2 the dispatch's (x, y, z) group
// counts, then its grid: 3 S, 4 rows per live split (MAXCHUNK or fewer: fused_attention.live_rows),
// 5 MIN_S, 6 WINDOW, 7 H (heads: grid rows), 8 PF_G (prefetch workgroups, rows H.. of the grid,
// prefetch.glsl; 0: none). x = the live splits.
#define GRID_RECORD 16u
layout(binding = GRID_ARGS) buffer GridArgsB { uint grid_args[]; };

// The arguments of every attention grid at position pos (the next step's, written last in a step).
void grid_args_update(uint pos) {
    for (uint g = 0u; g < GRID_N; g++) {
        const uint b = g * GRID_RECORD;
        const uint x = attn_live_splits(pos, grid_args[b + 6u], grid_args[b + 3u], grid_args[b + 4u],
                                        grid_args[b + 5u]);
        const uint pf = grid_args[b + 8u];
        grid_args[b] = x;
        grid_args[b + 1u] = grid_args[b + 7u] + (pf + x - 1u) / x;   // prefetch rows keep PF_G groups
    }
}
#endif

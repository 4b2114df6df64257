// MV_OUT(row, o): a matvec's output row stored, the includer's MV_STORE passing its final value.
// NORM_OUT (vkdecode/lowering/norm_pre.py): y feeds an RMS norm in the next dispatch, so this one
// also writes y * norm_w (norm weight bound at NO_NW, product at NO_XN) and each workgroup's sum of
// y^2 (NO_PART, one float per workgroup): the norm's matvec then loads one vector instead of x and
// norm_w, and sums the partials instead of squaring x. Include after the Y binding (y[]); shared
// by matmul_add.comp and moe_matmul_sum_add.comp.
#ifdef NORM_OUT
layout(binding = NO_NW) readonly buffer NONW { float no_nw[]; };
layout(binding = NO_XN) writeonly buffer NOXN { float no_xn[]; };
layout(binding = NO_PART) writeonly buffer NOPART { float no_part[]; };
#define MV_PART 1
#define MV_PART_STORE(g, s) no_part[g] = (s)
#define MV_OUT(row, o) { const float o_ = (o); y[row] = o_; no_xn[row] = o_ * no_nw[row]; mv_sq = o_ * o_; }
#else
#define MV_OUT(row, o) y[row] = (o)
#endif

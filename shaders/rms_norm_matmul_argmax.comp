#version 450
#extension GL_GOOGLE_include_directive : require
// RMS_NORM_MATMUL_ARGMAX, first pass: logits = W (x / rms(x) * norm_w) (logits is a program
// output, so it is written), and per workgroup the (max as float bits, index) pair of its rows, in
// argmax.comp's pair format; argmax.comp FINAL then reduces the pairs to the token. Workgroup g
// takes BLOCKS consecutive blocks of ROWS rows, so the final pass reads ~1000 pairs, not one per row.
// Ties go to the lowest index, as numpy's argmax: rows are visited in order and only a strictly
// better value (argmax.comp's `better`) replaces the best.
// Bindings: 0 x, 1 norm_w, 2 W data or q, [3 scales], then logits, pairs.
// Spec: 0 wg size, 1 K, 2 ROWS, 3 EPS, 4 M (rows bound), 5 BLOCKS. Push: row0 (first logits row of
// this call, non-zero for the chunks of a head beyond maxStorageBufferRange), pair0 (first pair).
#define NO_WG_REDUCE
#include "common.glsl"
#define NORM 1
#define B_X 0
#define B_NW 1
#include "fused_matvec.glsl"

layout(constant_id = 4) const uint M = 1;
layout(constant_id = 5) const uint BLOCKS = 1;
layout(push_constant) uniform Push { uint row0; uint pair0; } pc;

#define WB_0 2
#if defined(DT_F32) || defined(DT_F16)
#define B_LOGITS 3
#else
#define SB_0 3
#define B_LOGITS 4
#endif
#define SLOT 0
#include "fused_wslot.glsl"
layout(binding = B_LOGITS) writeonly buffer LB { float logits[]; };
layout(binding = B_LOGITS + 1) writeonly buffer PB { uvec2 pairs[]; };

bool better(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

// Row block `first`: its logits written, and (bv, bi) updated with its best row.
void logits_block(uint first, inout float bv, inout uint bi) {
    const uint t = gl_LocalInvocationID.x;
    fmv_clear();
    fmv_rows_0(first, M, 0);
    fmv_acc[ROWS] = fmv_ss_total();
    fmv_reduce();
    if (t == 0) {  // invocation 0 writes the block's logits and tracks the best row
        const float inv = fmv_inv_rms(fmv_total(ROWS));
        for (uint i = 0; i < ROWS && first + i < M; i++) {
            float v = fmv_total(i) * inv;
            uint row = pc.row0 + first + i;
            logits[row] = v;
            if (better(v, row, bv, bi)) { bv = v; bi = row; }
        }
    }
}

void main() {
    const uint g = flat_group_id();
    const uint nblocks = (M + ROWS - 1) / ROWS;
    if (g * BLOCKS >= nblocks) return;  // padding of a 2-D grid: the whole workgroup leaves
    float bv = NEG_INF;
    uint bi = 0xFFFFFFFFu;
    // BLOCKS is a spec constant: one block takes no loop. lavapipe runs the block 1.6x slower
    // inside the loop (SmolLM2's 49152x576 q4_1 head, 16 x 16: 19 vs 12 ms), as it does not
    // unroll / keep in registers a dot loop nested in a loop with barriers.
    if (BLOCKS == 1) {
        logits_block(g * ROWS, bv, bi);
    } else {
        for (uint b = g * BLOCKS; b < min(nblocks, (g + 1) * BLOCKS); b++) logits_block(b * ROWS, bv, bi);
    }
    if (gl_LocalInvocationID.x == 0) pairs[pc.pair0 + g] = uvec2(floatBitsToUint(bv), bi);
}

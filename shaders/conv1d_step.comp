#version 450
#extension GL_GOOGLE_include_directive : require
// conv1d_step (fusion/ir.py): Qwen3.5's causal depthwise convolution with SiLU, for ROWS new tokens
// at positions pos .. pos + ROWS - 1 (a prompt chunk; 1 in a decode step). hist holds the last
// K - 1 inputs as rows by position % (K - 1); positions before 0 read as zero, so a sequence
// restarting at position 0 needs no clearing. One invocation per channel: it reads the history
// and the chunk's rows, then writes the last K - 1 inputs back over what they replace.
// BATCH (fusion/chunk_batch.py): the ROWS rows are a batched step's sequences, side by side.
// Bindings: 0 x[ROWS C], 1 w[C K], 2 step, 3 y[ROWS C], 4 hist[(K - 1) C] (BATCH: a copy per slot).
// Spec: 0 wg size, 1 C, 2 K, 3 ROWS.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint C = 1;
layout(constant_id = 2) const uint K = 4;
layout(constant_id = 3) const uint ROWS = 1;

layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };
layout(binding = 3) writeonly buffer YB { float y[]; };
layout(binding = 4) buffer HB { float hist[]; };

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
#ifdef BATCH
    // a batched step's row r: its own sequence, one token at its step record's position, its
    // history copy STEP_SLOT of hist
    if (i >= ROWS * C) return;
    const uint c = i % C, r = i / C, n = 1u;
    const uint pos = step[r * STEP_WORDS + STEP_POS], hb = step[r * STEP_WORDS + STEP_SLOT] * (K - 1) * C;
#else
    if (i >= C) return;
    const uint c = i, r = 0u, n = ROWS, pos = step[STEP_POS], hb = 0u;
#endif
    for (uint t = 0; t < n; t++) {
        const uint p = pos + t;
        float acc = 0.0;
        for (uint j = 0; j < K; j++) {   // u at position p - (K - 1 - j); none before 0
            const uint back = K - 1 - j;
            if (p < back) continue;
            const uint q = p - back;     // x's row where the rows have it, else the history's
            acc += w[c * K + j] * (q >= pos ? x[(r + q - pos) * C + c] : hist[hb + (q % (K - 1)) * C + c]);
        }
        y[(r + t) * C + c] = acc / (1.0 + exp(-acc));
    }
    // the newest K - 1 inputs: the rows' where they have them (older ones are in hist already)
    for (uint t = n > K - 1 ? n - (K - 1) : 0u; t < n; t++)
        hist[hb + ((pos + t) % (K - 1)) * C + c] = x[(r + t) * C + c];
}

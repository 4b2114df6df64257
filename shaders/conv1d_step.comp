#version 450
#extension GL_GOOGLE_include_directive : require
// conv1d_step (fusion/ir.py): Qwen3.5's causal depthwise convolution with SiLU, for ROWS new tokens
// at positions pos .. pos + ROWS - 1 (a prompt chunk; 1 in a decode step). hist holds the last
// K - 1 inputs as rows by position % (K - 1); positions before 0 read as zero, so a sequence
// restarting at position 0 needs no clearing. A workgroup owns WG / RL channels; a channel's RL
// lanes split the chunk's rows (RL 1: one lane walks them in order, as on a CPU). Every lane reads
// the history before the barrier; after it, the lanes of the newest K - 1 rows write their inputs
// over what they replace (the channel's history is this workgroup's alone). A padded prompt chunk
// (chunk_rows: its step's STEP_LIVE) runs its prompt rows; the rest read as zero and leave hist.
// BATCH (fusion/chunk_batch.py): the ROWS rows are a batched step's sequences, side by side.
// Bindings: 0 x[ROWS C], 1 w[C K], 2 step, 3 y[ROWS C], 4 hist[(K - 1) C] (BATCH: a copy per slot).
// Spec: 0 wg size, 1 C, 2 K, 3 ROWS, 4 RL (row lanes a channel, a power of two <= wg size).
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint C = 1;
layout(constant_id = 2) const uint K = 4;
layout(constant_id = 3) const uint ROWS = 1;
layout(constant_id = 4) const uint RL = 1;

layout(binding = 0) readonly buffer XB { float x[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) readonly buffer StepB { uint step[]; };
layout(binding = 3) writeonly buffer YB { float y[]; };
layout(binding = 4) buffer HB { float hist[]; };

// y of row r + t (position p = pos + t) of channel c: SiLU of the K taps, the rows' inputs where
// the chunk has them (from row r at pos), else the history at hb
void conv_row(uint c, uint r, uint t, uint pos, uint hb) {
    const uint p = pos + t;
    float acc = 0.0;
    for (uint j = 0; j < K; j++) {   // u at position p - (K - 1 - j); none before 0
        const uint back = K - 1 - j;
        if (p < back) continue;
        const uint q = p - back;
        acc += w[c * K + j] * (q >= pos ? x[(r + q - pos) * C + c] : hist[hb + (q % (K - 1)) * C + c]);
    }
    y[(r + t) * C + c] = acc / (1.0 + exp(-acc));
}

void main() {
#ifdef BATCH
    // a batched step's row r: its own sequence, one token at its step record's position, its
    // history copy STEP_SLOT of hist
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= ROWS * C) return;
    const uint c = i % C, r = i / C;
    const uint pos = step[r * STEP_WORDS + STEP_POS], hb = step[r * STEP_WORDS + STEP_SLOT] * (K - 1) * C;
    conv_row(c, r, 0u, pos, hb);
    hist[hb + (pos % (K - 1)) * C + c] = x[r * C + c];
#else
    const uint CH = gl_WorkGroupSize.x / RL;   // channels a workgroup
    if (flat_group_id() * CH >= C) return;     // a 2-D grid's spare groups: whole workgroups
    const uint c = flat_group_id() * CH + gl_LocalInvocationID.x % CH, lane = gl_LocalInvocationID.x / CH;
    const bool live = c < C;                   // the last group's channels past C take the barrier only
    const uint pos = step[STEP_POS], n = chunk_rows(ROWS);
    if (live)
        for (uint t = lane; t < ROWS; t += RL)
            if (t < n) conv_row(c, 0u, t, pos, 0u);
            else y[t * C + c] = 0.0;   // a padded chunk's rows past the prompt: zero, no history
    barrier();  // every lane has read the history its rows need
    // the newest K - 1 inputs: the rows' where they have them (older ones are in hist already)
    if (live)
        for (uint t = lane; t < n; t += RL)
            if (t + (K - 1) >= n) hist[(pos + t) % (K - 1) * C + c] = x[t * C + c];
#endif
}

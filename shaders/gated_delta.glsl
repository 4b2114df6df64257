// What gated_delta_step.comp (a row at a time) and gated_delta_chunk.comp (blocks of rows) share:
// their specialization constants and bindings, and a workgroup's COLS columns of value head h's
// state S (DK x DV, row-major in s) in shared memory, read at the start of a call and written at its
// end. Head h = group / NCB, column block group % NCB; the WG / COLS lanes of column jl split the
// state's rows i = p0, p0 + P, ... The state reads as zero at position 0 (whatever the buffer
// holds: an earlier sequence). Include after common.glsl.
// BATCH (fusion/chunk_batch.py, gated_delta_step only): ROWS independent sequences, HV * NCB
// workgroups each; row t's state is copy STEP_SLOT of its step record in s, at its own position.
// Bindings: 0 qkv, 1 a[HV], 2 b[HV], 3 a_log[HV], 4 dt_bias[HV], 5 step, 6 o[HV DV], 7 s[HV DK DV]
// (per row where a chunk has rows). Spec: 0 wg size, 1 HK, 2 HV, 3 DK, 4 DV, 5 ROWS, 6 COLS.
// V_TILED: value head h reads key head h % HK (llama.cpp's GGUF order, V heads tiled over the key
// heads), not h / (HV / HK) (HF's grouped order).

layout(constant_id = 1) const uint HK = 1;
layout(constant_id = 2) const uint HV = 1;
layout(constant_id = 3) const uint DK = 16;
layout(constant_id = 4) const uint DV = 16;
layout(constant_id = 5) const uint ROWS = 1;  // a prompt chunk's rows, in order (1: a decode step)
layout(constant_id = 6) const uint COLS = 16; // state columns a workgroup (a power of two <= WG)

layout(binding = 0) readonly buffer QB { float qkv[]; };
layout(binding = 1) readonly buffer AB { float ga[]; };
layout(binding = 2) readonly buffer BB { float gb[]; };
layout(binding = 3) readonly buffer LB { float a_log[]; };
layout(binding = 4) readonly buffer DB { float dt_bias[]; };
layout(binding = 5) readonly buffer StepB { uint step[]; };
layout(binding = 6) writeonly buffer OB { float o[]; };
layout(binding = 7) buffer SB { float s[]; };

shared float st[DK * COLS];   // st[i * COLS + jl]: neighbouring lanes, neighbouring words

const uint CQ = 2 * HK * DK + HV * DV;   // a row of qkv
const uint NCB = (DV + COLS - 1) / COLS; // column blocks a head
const uint P = gl_WorkGroupSize.x / COLS;   // lanes a column
uint h, hk, jl, p0, j, base;             // this invocation's place (delta_load)
bool col;                                // j < DV: the last block's columns past DV take barriers only

// this invocation's place in workgroup `group` of a row, and its rows of the state's columns
// (copy `slot` of s: a batched step's) into st
void delta_load(uint group, uint pos, uint slot) {
    h = group / NCB;
#ifdef V_TILED
    hk = h % HK;
#else
    hk = h / (HV / HK);
#endif
    jl = gl_LocalInvocationID.x % COLS;
    p0 = gl_LocalInvocationID.x / COLS;
    j = (group % NCB) * COLS + jl;
    col = j < DV;
    base = (slot * HV + h) * DK * DV;
    for (uint i = p0; i < DK; i += P) st[i * COLS + jl] = (col && pos != 0u) ? s[base + i * DV + j] : 0.0;
}

// a padded prompt chunk's rows from `live` on (past its prompt rows, chunk_rows): output zero, the
// state untouched
void delta_zero_rows(uint live) {
    if (col && p0 == 0u)
        for (uint t = live; t < ROWS; t++) o[t * HV * DV + h * DV + j] = 0.0;
}

void delta_store() {
    if (col)
        for (uint i = p0; i < DK; i += P) s[base + i * DV + j] = st[i * COLS + jl];
}

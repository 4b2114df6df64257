// QKV_IN for rope_kv_write_attention_sg.comp: the attention workgroup computes the current token's
// q (its head), k and v (its kv head) itself, h = x / rms(x) * norm_w and y = W h for the 3 * D rows,
// instead of reading them from a q/k/v projection dispatch before it: one dispatch and one barrier
// fewer per layer where those rows are few (vkdecode/fused_qkv_attention.py bounds their bytes).
// Each subgroup takes QI_ROWS of the 3 * D rows together (x loaded once per unit for all of them,
// their weight loads in flight at once) and leaves its sums in shared memory.
// Includer: D, LANES, NSG, the binding defines B_XIN (x), B_NWIN (norm_w), WB_0..2 / SB_0..2 (q, k,
// v weights, one dtype), spec constants KIN (x elements) and EPS_IN; DT_* and WVEC as the matvecs'.
layout(binding = B_XIN) readonly buffer XInB { vec4 xin4[]; };
layout(binding = B_XIN) readonly buffer XIn1B { float xin1[]; };
layout(binding = B_NWIN) readonly buffer NwInB { vec4 nwin4[]; };
float qi_ss = 0.0;
vec4 qi_x4(uint i) { const vec4 a = xin4[i]; qi_ss += dot(a, a); return a * nwin4[i]; }
#define FW_NO_FMV_ROWS 1
#define X4(i) qi_x4(i)
#define X1(i) xin1[i]
#define SLOT 0
#include "fused_wslot.glsl"
#undef SLOT
#define SLOT 1
#include "fused_wslot.glsl"
#undef SLOT
#define SLOT 2
#include "fused_wslot.glsl"
#undef SLOT
#undef X4
#undef X1

const uint QI_ROWS = (3u * D + NSG - 1u) / NSG;   // rows per subgroup
shared float qi_out[3u * D];                        // q, k, v of the current token

// Rows r = QI_ROWS * sg .. of [q of head h | k of kv head | v of kv head]. Contains a barrier: call
// from uniform control flow.
void qkv_in(uint h, uint kvh, uint sg, uint lane) {
    float acc[QI_ROWS];
    for (uint i = 0u; i < QI_ROWS; i++) acc[i] = 0.0;
    qi_ss = 0.0;
    for (uint u = lane; u < KIN / UNIT_ELEMS; u += LANES) {
        vec4 xv[XU_VEC4];
        load_x_0(u, xv);
        for (uint i = 0u; i < QI_ROWS; i++) {
            const uint r = min(QI_ROWS * sg + i, 3u * D - 1u);   // past the end: a repeat, dropped
            const uint part = r / D, row = (part == 0u ? h : kvh) * D + r % D;
            const uint rw = row * ROW_WORDS(KIN), rs = row * ROW_SCALES(KIN);
            acc[i] += part == 0u ? unit_dot_0(rw, rs, u, xv)
                                 : (part == 1u ? unit_dot_1(rw, rs, u, xv) : unit_dot_2(rw, rs, u, xv));
        }
    }
    const float inv = inversesqrt(subgroupAdd(qi_ss) / float(KIN) + EPS_IN);
    for (uint i = 0u; i < QI_ROWS; i++) {
        const float v = subgroupAdd(acc[i]) * inv;
        const uint r = QI_ROWS * sg + i;
        if (lane == 0u && r < 3u * D) qi_out[r] = v;
    }
    barrier();
}

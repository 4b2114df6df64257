// One weight slot of a fused matvec: dequant.glsl included again with its buffers and functions
// renamed by the suffix _<SLOT>, so one kernel reads several weights (q/k/v, gate/up), each from
// its own binding, with the shared dequantisation code. Include once per slot:
//   #define SLOT 0  (then #undef SLOT / #define SLOT 1 ...)   #include "fused_wslot.glsl"
// The includer defines WB_<SLOT> (data or q binding) and, for quant dtypes, SB_<SLOT> (scales);
// every slot of one kernel has the same dtype (DT_*, WVEC), or, with SLOT_DTYPES, a quant dtype of
// its own (below); either way the slots share UNIT_ELEMS and XU_VEC4, and each slot's fmv_rows_<SLOT>
// uses its own ROW_WORDS / ROW_SCALES. Needs fused_matvec.glsl first (K, ROWS, X4).
// After an inclusion, `unit_dot`, `load_x`, ... name the current slot's functions.
// Every global name dequant.glsl declares (blocks, their members, functions) must be renamed
// below; a new one there shows up as "Cannot reuse block name" / a redefinition error here.

#ifndef FUSED_WSLOT_RENAMES
#define FUSED_WSLOT_RENAMES
#define FW_CAT_(a, b) a##b
#define FW_CAT(a, b) FW_CAT_(a, b)
#define WF FW_CAT(WF_, SLOT)
#define WF4 FW_CAT(WF4_, SLOT)
#define WU FW_CAT(WU_, SLOT)
#define WU4 FW_CAT(WU4_, SLOT)
#define WU2 FW_CAT(WU2_, SLOT)
#define WS FW_CAT(WS_, SLOT)
#define WS4 FW_CAT(WS4_, SLOT)
#define w_s4 FW_CAT(w_s4_, SLOT)
#define bytebits FW_CAT(bytebits_, SLOT)
#define u2f4 FW_CAT(u2f4_, SLOT)
#define u2f FW_CAT(u2f_, SLOT)
#define NL16 FW_CAT(NL16_, SLOT)
#define nl4lo FW_CAT(nl4lo_, SLOT)
#define nl4hi FW_CAT(nl4hi_, SLOT)
#define block_dm FW_CAT(block_dm_, SLOT)
#define k4_scale_min FW_CAT(k4_scale_min_, SLOT)
#define k3_scale FW_CAT(k3_scale_, SLOT)
#define w_f FW_CAT(w_f_, SLOT)
#define w_f4 FW_CAT(w_f4_, SLOT)
#define w_u FW_CAT(w_u_, SLOT)
#define w_u4 FW_CAT(w_u4_, SLOT)
#define w_u2 FW_CAT(w_u2_, SLOT)
#define w_s FW_CAT(w_s_, SLOT)
#define i8x4 FW_CAT(i8x4_, SLOT)
#define lo4 FW_CAT(lo4_, SLOT)
#define hi4 FW_CAT(hi4_, SLOT)
#define pos4 FW_CAT(pos4_, SLOT)
#define POS_S FW_CAT(POS_S_, SLOT)
#define POS_O FW_CAT(POS_O_, SLOT)
#define q5hi FW_CAT(q5hi_, SLOT)
#define load_x FW_CAT(load_x_, SLOT)
#define unit_dot FW_CAT(unit_dot_, SLOT)
#define load_x8 FW_CAT(load_x8_, SLOT)
#define unit_dot8 FW_CAT(unit_dot8_, SLOT)
#define q6v FW_CAT(q6v_, SLOT)
#define kq_xv FW_CAT(kq_xv_, SLOT)
#define kw_load FW_CAT(kw_load_, SLOT)
#define kw_half FW_CAT(kw_half_, SLOT)
#define kw_scaled FW_CAT(kw_scaled_, SLOT)
#define kw_xsum FW_CAT(kw_xsum_, SLOT)
#define kw_x FW_CAT(kw_x_, SLOT)
#define q6_scaled FW_CAT(q6_scaled_, SLOT)
#define k4_scaled FW_CAT(k4_scaled_, SLOT)
#define dequant_elem FW_CAT(dequant_elem_, SLOT)
#define unit_weights FW_CAT(unit_weights_, SLOT)
#define unit_vec4 FW_CAT(unit_vec4_, SLOT)
#define B_W FW_CAT(WB_, SLOT)
#define B_S FW_CAT(SB_, SLOT)
#endif

// SLOT_DTYPES: each slot has its own quant dtype, DTS_<SLOT> = its index in vkdecode.quant.QUANT_TYPES
// (a Q4_K_M q/k/v has q4_k q and k and a q6_k v); every quant dtype has 8-element units and two
// vec4 of x per unit, so the slots differ only in what this inclusion defines.
#ifdef SLOT_DTYPES
#undef DT_Q8_0
#undef DT_Q4_0
#undef DT_Q4_1
#undef DT_Q5_0
#undef DT_Q4_K
#undef DT_Q5_K
#undef DT_Q6_K
#undef DT_Q2_K
#undef DT_Q3_K
#undef DT_Q5_1
#undef DT_IQ4_NL
#undef DT_MXFP4
#undef SLOT_DT
// (glslang does not expand a token-pasting macro inside #if: pick DTS_<SLOT> by hand)
#if SLOT == 0
#define SLOT_DT DTS_0
#elif SLOT == 1
#define SLOT_DT DTS_1
#elif SLOT == 2
#define SLOT_DT DTS_2
#else
#define SLOT_DT DTS_3
#endif
#if SLOT_DT == 0
#define DT_Q8_0 1
#elif SLOT_DT == 1
#define DT_Q4_0 1
#elif SLOT_DT == 2
#define DT_Q4_1 1
#elif SLOT_DT == 3
#define DT_Q5_0 1
#elif SLOT_DT == 4
#define DT_Q4_K 1
#elif SLOT_DT == 5
#define DT_Q5_K 1
#elif SLOT_DT == 6
#define DT_Q6_K 1
#elif SLOT_DT == 7
#define DT_Q2_K 1
#elif SLOT_DT == 8
#define DT_Q3_K 1
#elif SLOT_DT == 9
#define DT_Q5_1 1
#elif SLOT_DT == 10
#define DT_IQ4_NL 1
#elif SLOT_DT == 11
#define DT_MXFP4 1
#endif
#endif

// GLSL forbids redefining a macro with another body: drop the previous slot's definitions.
#undef ROW_WORDS
#undef ROW_SCALES
#undef KQUANT
#undef UNIT_ELEMS
#undef QUANT
#undef BLOCK_WORDS
#undef XU_VEC4
#undef XN_VEC4
#undef KWIDE
#undef load_x_n
#undef unit_dot_n
#undef Q6_SCL
#undef Q6_OFF
#undef KQ_XHI
#undef KW_SPLIT
#include "dequant.glsl"

// fmv_acc[base + i] += W[first + i, :] . x for i < ROWS (rows past m - 1 re-read row m - 1, their
// sums are dropped by the caller), every invocation taking the units t, t + WG, ...
void FW_CAT(fmv_rows_, SLOT)(uint first, uint m, uint base) {
    for (uint u = gl_LocalInvocationID.x; u < K / UNIT_ELEMS; u += gl_WorkGroupSize.x) {
#ifdef KW_SPLIT
#define KW_ACC(i) fmv_acc[base + (i)]
#define KW_M m
#include "kwide_rows.glsl"
#undef KW_ACC
#undef KW_M
#else
        vec4 xv[XU_VEC4];
        load_x(u, xv);
        for (uint i = 0; i < ROWS; i++) {
            uint r = min(first + i, m - 1);
            fmv_acc[base + i] += unit_dot(r * ROW_WORDS(K), r * ROW_SCALES(K), u, xv);
        }
#endif
    }
}

// KV cache storage, f32 or (KV_F16) f16, for every shader that touches the caches. The includer
// defines KV_BK, KV_BV (binding numbers of the K and V caches) and KV_WRITE where it writes them.
// Reads: KC1(i) / VC1(i) element i, KC4(i) / VC4(i) the vec4 at vec4 index i. f16 caches are
// uint words of two halves (the even element in the low half) read with unpackHalf2x16, so no
// 16-bit storage feature is needed; a word is written whole (KC_PUT2 / VC_PUT2: elements i, i+1,
// i even) by one invocation, never half of it. kv_round(x) is x as the cache stores it (the same
// packHalf2x16), so a kernel that uses the current row from registers sees what a later step
// reads back.
#ifdef KV_WRITE
#define KV_ACCESS
#else
#define KV_ACCESS readonly
#endif
#ifdef KV_F16
layout(binding = KV_BK) KV_ACCESS buffer KCB { uint kc_h[]; };
layout(binding = KV_BK) readonly buffer KC4 { uvec2 kc_h4[]; };
layout(binding = KV_BV) KV_ACCESS buffer VCB { uint vc_h[]; };
layout(binding = KV_BV) readonly buffer VC4 { uvec2 vc_h4[]; };
float kv_half(uint w, uint i) {
    const vec2 h = unpackHalf2x16(w);
    return (i & 1u) == 0u ? h.x : h.y;
}
vec4 kv_half4(uvec2 w) { return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
// The half back to f32 with integer ops, not unpackHalf2x16: NVIDIA's compiler (H100, driver
// 580.159.04) folds unpackHalf2x16(packHalf2x16(x)) into x, so a kernel's current row stayed
// unrounded while the cache held it rounded (logits 2e-4 - 4e-3 off the reference in a tiny f16-KV
// model; every element of a position-0 attention output differed from the stored v, by up to 1.9e-3).
float kv_half_bits(uint h) {
    const uint s = (h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0u) {   // zero or subnormal: m * 2^-24, exact in f32
        const float v = float(m) * 5.9604644775390625e-8;
        return s != 0u ? -v : v;
    }
    return uintBitsToFloat(s | (e == 31u ? 0x7F800000u : (e + 112u) << 23) | (m << 13));
}
float kv_round(float x) { return kv_half_bits(packHalf2x16(vec2(x, 0.0)) & 0xFFFFu); }
#define KC1(i) kv_half(kc_h[(i) / 2u], (i))
#define VC1(i) kv_half(vc_h[(i) / 2u], (i))
#define KC4(i) kv_half4(kc_h4[i])
#define VC4(i) kv_half4(vc_h4[i])
#define KC_PUT2(i, a, b) kc_h[(i) / 2u] = packHalf2x16(vec2(a, b))
#define VC_PUT2(i, a, b) vc_h[(i) / 2u] = packHalf2x16(vec2(a, b))
#else
layout(binding = KV_BK) KV_ACCESS buffer KCB { float kc[]; };
layout(binding = KV_BK) readonly buffer KC4 { vec4 kc4[]; };
layout(binding = KV_BV) KV_ACCESS buffer VCB { float vc[]; };
layout(binding = KV_BV) readonly buffer VC4 { vec4 vc4[]; };
float kv_round(float x) { return x; }
#define KC1(i) kc[i]
#define VC1(i) vc[i]
#define KC4(i) kc4[i]
#define VC4(i) vc4[i]
#define KC_PUT2(i, a, b) { kc[i] = (a); kc[(i) + 1u] = (b); }
#define VC_PUT2(i, a, b) { vc[i] = (a); vc[(i) + 1u] = (b); }
#endif

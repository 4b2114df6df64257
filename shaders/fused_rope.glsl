// RoPE for fused kernels: (cos, sin) of pair i of a D-wide head at position pos, the same formula
// as rope.comp (angle pos * freqs[i], reduced to [-pi, pi] first because Vulkan only bounds
// sin/cos error there), so fused and per-op kernels rotate identically.
// Needs the spec constant D and the define B_FREQ (binding of the inverse-frequency table).
layout(binding = B_FREQ) readonly buffer FreqB { float freqs[]; };

// (rope_angle_cs takes the table entry already loaded: a kernel can load it before it knows pos)
vec2 rope_angle_cs(uint pos, float freq) {
    float ang = float(pos) * freq;
    const float TWO_PI = 6.283185307179586;
    ang -= TWO_PI * floor(ang / TWO_PI + 0.5);
    return vec2(cos(ang), sin(ang));
}
vec2 rope_cos_sin(uint pos, uint i) { return rope_angle_cs(pos, freqs[i]); }

// Element indices (a, b) of pair i: NEOX rotates i with i + D/2, otherwise 2i with 2i + 1.
uvec2 rope_pair(uint i) {
#ifdef NEOX
    return uvec2(i, i + D / 2);
#else
    return uvec2(2 * i, 2 * i + 1);
#endif
}

// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), shared by gelu_mul.comp and the
// fused GeGLU (fused_swiglu.glsl with GELU). The tanh argument is clamped to +-10 (tanh is 1.0f
// there already) because tanh written as a ratio of exponentials turns inf / inf into NaN on some
// drivers for large |x|.
float gelu_tanh(float x) {
    const float C = 0.7978845608028654;   // sqrt(2 / pi)
    float t = tanh(clamp(C * (x + 0.044715 * x * x * x), -10.0, 10.0));
    return 0.5 * x * (1.0 + t);
}

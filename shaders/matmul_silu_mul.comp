#version 450
#extension GL_GOOGLE_include_directive : require
// MATMUL_SILU_MUL: y = silu(W_gate x) * (W_up x), one dispatch. Bindings and spec: fused_swiglu.glsl.
#include "fused_swiglu.glsl"

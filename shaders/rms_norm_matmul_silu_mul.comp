#version 450
#extension GL_GOOGLE_include_directive : require
// RMS_NORM_MATMUL_SILU_MUL: y = silu(W_gate h) * (W_up h), h = x / rms(x) * norm_w, one dispatch
// (ffn_norm, gate, up and SwiGLU). Bindings and spec: fused_swiglu.glsl.
#define NORM 1
#include "fused_swiglu.glsl"

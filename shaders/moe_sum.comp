#version 450
#extension GL_GOOGLE_include_directive : require
// moe_sum: out[r*N + i] = sum over the G slots j of row r of w[r*G + j] * y[(r*G + j)*N + i], one
// invocation per output element. Bindings: 0 y, 1 w, 2 out. Spec: 0 wg size, 1 N, 2 G, 3 ROWS.
// RES (a chunk's MOE_SUM_ADD_CHUNK): out[i] = that sum + res[i], binding 3 res: the add after it
// (add.comp's a + b, one rounding, commutative: the same bits) without a dispatch of its own.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint N = 1;
layout(constant_id = 2) const uint G = 1;
layout(constant_id = 3) const uint ROWS = 1;
layout(binding = 0) readonly buffer YB { float y[]; };
layout(binding = 1) readonly buffer WB { float w[]; };
layout(binding = 2) writeonly buffer OB { float o[]; };
#ifdef RES
layout(binding = 3) readonly buffer RB { float res[]; };
#endif

void main() {
    const uint i = flat_group_id() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (i >= N * ROWS) return;
    const uint r = i / N, c = i % N;
    // precise: no fused multiply-adds and no reordering, so with RES the sum is the same value as
    // without it and the residual is added last, once (lavapipe reassociated (r + p0) + p1 here)
    precise float s = 0.0;
    for (uint j = 0; j < G; j++) s += w[r * G + j] * y[(r * G + j) * N + c];
#ifdef RES
    s += res[i];
#endif
    o[i] = s;
}

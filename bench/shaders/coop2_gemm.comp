#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
// Probe of VK_NV_cooperative_matrix2 (bench/coop2_probe.py; never shipped): Y[t, m] = X[t, :] .
// W[m, :], X (T x K) and W (M x K) f16 row-major, Y (T x M) f32, the way the prompt chunks' matmuls
// lay them out; a workgroup owns a BT x BM tile of Y as one workgroup-scope accumulator and loads
// its k steps through tensor layouts (the driver stages them: no shared memory or barriers here,
// the part that halves shaders/matmul_rows_coop.comp's rate twice, bench/coop_ceiling.py).
// W's tile is read transposed (a weight row is a column of B). Exact tiles only (T % BT, M % BM,
// K % BK == 0). Spec: 0 workgroup size, 1 T, 2 M, 3 K. Defines: BT, BM, BK.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint T = 512;
layout(constant_id = 2) const uint M = 4096;
layout(constant_id = 3) const uint K = 4096;
layout(binding = 0) readonly buffer XB { float16_t x[]; };
layout(binding = 1) readonly buffer WB { float16_t w[]; };
layout(binding = 2) writeonly buffer YB { float y[]; };

void main() {
    const uint m0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BT;
    tensorLayoutNV<2> tx = createTensorLayoutNV(2);
    tx = setTensorLayoutDimensionNV(tx, T, K);
    tensorLayoutNV<2> tw = createTensorLayoutNV(2);
    tw = setTensorLayoutDimensionNV(tw, M, K);
    tensorLayoutNV<2> ty = createTensorLayoutNV(2);
    ty = setTensorLayoutDimensionNV(ty, T, M);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    coopmat<float, gl_ScopeWorkgroup, BT, BM, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BT, BM, gl_MatrixUseAccumulator>(0.0);
    for (uint k0 = 0; k0 < K; k0 += BK) {
        coopmat<float16_t, gl_ScopeWorkgroup, BT, BK, gl_MatrixUseA> a;
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BM, gl_MatrixUseB> b;
        coopMatLoadTensorNV(a, x, 0, sliceTensorLayoutNV(tx, t0, BT, k0, BK));
        coopMatLoadTensorNV(b, w, 0, sliceTensorLayoutNV(tw, m0, BM, k0, BK), transposed);
        acc = coopMatMulAdd(a, b, acc);
    }
    coopMatStoreTensorNV(acc, y, 0, sliceTensorLayoutNV(ty, t0, BT, m0, BM));
}

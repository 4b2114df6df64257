#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_buffer_reference : require
// Probe of VK_NV_cooperative_matrix2 (bench/coop2_probe.py; never shipped): Y[t, m] = X[t, :] .
// W[m, :], X (T x K) and W (M x K) row-major, Y (T x M) f32, the way the prompt chunks' matmuls
// lay them out. A workgroup owns a BM x BT tile of Y^T as one workgroup-scope accumulator and
// loads its k steps through tensor layouts (the driver stages them: no shared memory or barriers
// here, the part that halves shaders/matmul_rows_coop.comp's rate twice, bench/coop_ceiling.py).
// W is the A operand (BM x BK, a weight row is a row of A), X the B operand read transposed, the
// result stored transposed: the orientation in which a decode function needs no transpose.
// Weights: f16, or (Q4K) vkdecode's q4_k words (quant/blocks.py: 32 q words a superblock, 4 s
// words) decoded element by element by a decode function the driver calls inside its loads.
// X: f16, or (XF32) the chunk's f32 rows decoded to f16 the same way. The tensor layouts clamp:
// rows of a partial tile read as 0 and are not stored (edge tiles without a separate kernel).
// Bindings: 0 W (q words for Q4K), 1 s words (Q4K only), then X, then Y.
// Spec: 0 workgroup size, 1 T, 2 M, 3 K. Defines: BT, BM, BK; Q4K, XF32; Q4K_MODE (timing probes of
// the decode function's cost: 1 constant scales, no scale words read; 2 the nibble alone).
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint T = 512;
layout(constant_id = 2) const uint M = 4096;
layout(constant_id = 3) const uint K = 4096;
#ifndef Q4K_MODE
#define Q4K_MODE 0
#endif
#ifdef Q4K
struct Q4KWords { uvec4 q[8]; };
layout(binding = 0) readonly buffer WB { Q4KWords w[]; };
layout(binding = 1) readonly buffer SB { uvec4 ws[]; };
#define B_X 2
#else
layout(binding = 0) readonly buffer WB { float16_t w[]; };
#define B_X 1
#endif
#ifdef XF32
layout(binding = B_X) readonly buffer XB { vec4 x[]; };
#else
layout(binding = B_X) readonly buffer XB { float16_t x[]; };
#endif
layout(binding = B_X + 1) writeonly buffer YB { float y[]; };

#ifdef Q4K
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Q4KRef { uvec4 q[8]; };
uint scale_byte(uvec4 s, uint b) { return (s[1 + b / 4] >> (8 * (b % 4))) & 0xFFu; }
// element e of superblock (row, kb): byte 32c + l of the qs holds elements 64c + l (low nibble)
// and 64c + 32 + l (high nibble); sub-block j = 2c + hi has the 6-bit scale and min of GGUF's
// get_scale_min_k4 packing
float16_t decode_q4k(const in Q4KRef bl, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    const uint e = coordInBlock[1];
    const uint c = e >> 6, l = e & 31, hi = (e >> 5) & 1;
    const uint byte_i = 32 * c + l;
    const uint n = (bl.q[byte_i >> 4][(byte_i >> 2) & 3] >> (8 * (l & 3) + 4 * hi)) & 15u;
#if Q4K_MODE == 1   // timing probe only: a constant scale and min, no scale words read
    return float16_t(float(n) * 0.0625 - 0.5);
#elif Q4K_MODE == 2   // timing probe only: the nibble alone
    return float16_t(n);
#endif
    const uvec4 s = ws[blockCoords[0] * (K / 256) + blockCoords[1]];
    const vec2 dm = unpackHalf2x16(s.x);
    const uint j = 2 * c + hi;
    uint sc, mn;
    if (j < 4) {
        sc = scale_byte(s, j) & 63u;
        mn = scale_byte(s, j + 4) & 63u;
    } else {
        sc = (scale_byte(s, j + 4) & 15u) | ((scale_byte(s, j - 4) >> 6) << 4);
        mn = (scale_byte(s, j + 4) >> 4) | ((scale_byte(s, j) >> 6) << 4);
    }
    return float16_t(dm.x * float(sc) * float(n) - dm.y * float(mn));
}
#define W_BLOCK 256
#define W_DECODE , decode_q4k
#else
#define W_BLOCK 1
#define W_DECODE
#endif
#ifdef XF32
layout(buffer_reference, std430, buffer_reference_align = 16) buffer F32x4Ref { vec4 v; };
float16_t decode_f32(const in F32x4Ref bl, const in uint blockCoords[2], const in uint coordInBlock[2]) {
    return float16_t(bl.v[coordInBlock[1]]);
}
#define X_BLOCK 4
#define X_DECODE , decode_f32
#else
#define X_BLOCK 1
#define X_DECODE
#endif

void main() {
    const uint m0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BT;
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tw =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tw = setTensorLayoutBlockSizeNV(tw, 1, W_BLOCK);
    tw = setTensorLayoutDimensionNV(tw, M, K);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> tx =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    tx = setTensorLayoutBlockSizeNV(tx, 1, X_BLOCK);
    tx = setTensorLayoutDimensionNV(tx, T, K);
    tensorLayoutNV<2, gl_CooperativeMatrixClampModeConstantNV> ty =
        createTensorLayoutNV(2, gl_CooperativeMatrixClampModeConstantNV);
    ty = setTensorLayoutDimensionNV(ty, T, M);
    tensorViewNV<2, false, 1, 0> transposed = createTensorViewNV(2, false, 1, 0);
    coopmat<float, gl_ScopeWorkgroup, BM, BT, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeWorkgroup, BM, BT, gl_MatrixUseAccumulator>(0.0);
    for (uint k0 = 0; k0 < K; k0 += BK) {
        coopmat<float16_t, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA> a;
        coopmat<float16_t, gl_ScopeWorkgroup, BK, BT, gl_MatrixUseB> b;
        coopMatLoadTensorNV(a, w, 0, sliceTensorLayoutNV(tw, m0, BM, k0, BK) W_DECODE);
        coopMatLoadTensorNV(b, x, 0, sliceTensorLayoutNV(tx, t0, BT, k0, BK), transposed X_DECODE);
        acc = coopMatMulAdd(a, b, acc);
    }
    coopMatStoreTensorNV(acc, y, 0, sliceTensorLayoutNV(ty, t0, BT, m0, BM), transposed);
}

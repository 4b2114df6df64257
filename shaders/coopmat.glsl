// Cooperative matrices for the *_coop.comp kernels (GL_KHR_cooperative_matrix: NVIDIA, AMD RDNA3+,
// Intel; glslang 13+, which vk/glslang.py finds), included right after #version and the include
// extension. The 16 x 16 x 16 f16 x f16 -> f32 subgroup-scope shape is the one vk/coopmat.py
// requires the device to report. (The GL_NV_cooperative_matrix form it replaced ran slower on
// the H200: Qwen3-0.6B matmuls at 512 rows 247 vs 212 us a layer, bench/results/nvidia-h200/
// 2026-11-27-khr-coop.)
// CM_A x CM_B + CM_C: 16 x 16 f16 operands, 16 x 16 f32 accumulator; coopMatLoad / coopMatStore
// take an element offset and a row stride in elements of the array, and CM_ROW or CM_COL.
// The kernels index their matrices by subgroup and split rows over lanes: vk/shaders.py creates
// their pipelines with REQUIRED_SUBGROUP_SIZE lanes per subgroup where the device lets it choose.
#define REQUIRED_SUBGROUP_SIZE 32
#extension GL_KHR_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#define CM_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define CM_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define CM_C coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define CM_ROW gl_CooperativeMatrixLayoutRowMajor
#define CM_COL gl_CooperativeMatrixLayoutColumnMajor
const uint LANES = REQUIRED_SUBGROUP_SIZE;

#version 450
#extension GL_GOOGLE_include_directive : require
// moe_matmul: slot s of S (an expert chosen for a row) gives y[s*M ..] = W[ids[s]] @ x row s / XDIV,
// W a 3-D weight (experts, M, K) of any dtype (DT_*) read whole from one binding: the expert's rows
// start at row ids[s] * M, so the ids stay on the GPU. Workgroup g: slot g / BLOCKS, row block
// g % BLOCKS. Bindings: 0 W (quant: 0 q, 1 scales), then x, ids, y.
// Spec: 0 wg size, 1 K, 2 M (rows of one expert), 3 ROWS (matvec.glsl), 4 XDIV (slots per x row),
// 5 BLOCKS (row blocks per slot). BIAS (gpt-oss, MOE_MATMUL_BIAS): binding B_Y + 1 holds the
// experts' bias rows (experts x M), the slot's expert's row added as y is stored.
#define NO_WG_REDUCE
#include "common.glsl"

#define B_W 0
#if defined(DT_F32) || defined(DT_F16)
#define B_X 1
#else
#define B_S 1
#define B_X 2
#endif
#define B_IDS (B_X + 1)
#define B_Y (B_X + 2)

layout(constant_id = 4) const uint XDIV = 1;
layout(constant_id = 5) const uint BLOCKS = 1;
layout(constant_id = 6) const uint XK = 32;  // K again: dequant.glsl's load_x comes before matvec.glsl's K

layout(binding = B_X) readonly buffer X1B { float x1[]; };
layout(binding = B_X) readonly buffer X4B { vec4 x4[]; };
layout(binding = B_IDS) readonly buffer IDB { uint ids[]; };
layout(binding = B_Y) writeonly buffer YB { float y[]; };

uint moe_slot = 0u;
#define X1(i) x1[moe_slot / XDIV * XK + (i)]
#define X4(i) x4[moe_slot / XDIV * (XK / 4) + (i)]
#define MV_GROUP() (flat_group_id() % BLOCKS)
#define MV_ROW_BASE(j) (ids[moe_slot] * M)
#ifdef BIAS
layout(binding = B_Y + 1) readonly buffer BiasB { float bias[]; };
#define MV_STORE(row, v) y[moe_slot * M + (row)] = (v) + bias[ids[moe_slot] * M + (row)]
#else
#define MV_STORE(row, v) y[moe_slot * M + (row)] = (v)
#endif

#include "dequant.glsl"
#include "matvec.glsl"

void main() {
    moe_slot = flat_group_id() / BLOCKS;
    matvec_main();
}

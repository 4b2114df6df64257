// The chunk matmuls' expert hooks (define MOE; moe_group.comp wrote the groups at binding B_G):
// a workgroup's chunk rows are one tile of one expert's slots. Without MOE the hooks are the plain
// chunk's identities. Include after the Y binding; defines WROW (weight row), XROW / YROW (chunk
// row of a tile-local row), TILE_ROWS (rows of this tile), TILE_N0 (its first chunk row), and
// MOE_OUT(at, acc), the value stored at y[at]: acc, or with GLU_SILU (MOE only: a chunk's grouped
// up matmul, lowering/moe_chunk.py) silu(gate[at]) * acc, gate (binding B_GATE = B_G + 1) the
// grouped gate matmul's output in Y's layout; silu_mul.comp's expression, so its bits too.
#ifdef MOE
#define B_G (B_Y + 1)
layout(constant_id = 6) const uint XDIV = 1;    // slots per x row (the router's k for gate / up)
layout(constant_id = 7) const uint GROUP_ORDER = 1;    // where order[] starts in G
layout(binding = B_G) readonly buffer GB { uint g[]; };
uint moe_e = 0, moe_first = 0, moe_count = 0;

bool moe_tile(uint t) {
    if (t >= g[0]) return false;
    moe_e = g[1 + 3 * t];
    moe_first = g[2 + 3 * t];
    moe_count = g[3 + 3 * t];
    return true;
}
#define WROW(m) (moe_e * M + (m))
#define YROW(n) g[GROUP_ORDER + moe_first + (n)]
#define XROW(n) (YROW(n) / XDIV)
#define TILE_ROWS moe_count
#define TILE_N0(bn) 0u
#ifdef GLU_SILU
#define B_GATE (B_G + 1)
layout(binding = B_GATE) readonly buffer GateB { float gate[]; };
float moe_out(uint at, float acc) {
    const float v = gate[at];
    return v / (1.0 + exp(-v)) * acc;
}
#define MOE_OUT(at, acc) moe_out(at, acc)
#endif
#else
bool moe_tile(uint t) { return true; }
#define WROW(m) (m)
#define YROW(n) (n)
#define XROW(n) (n)
#define TILE_ROWS T
#define TILE_N0(bn) (gl_WorkGroupID.y * (bn))
#endif
#if defined(GLU_SILU) && !defined(MOE)
#error "GLU_SILU needs MOE (its gate binding follows the groups')"
#endif
#ifndef MOE_OUT
#define MOE_OUT(at, acc) (acc)
#endif

// The chunk matmuls' expert hooks (define MOE; moe_group.comp wrote the groups at binding B_G):
// a workgroup's chunk rows are one tile of one expert's slots. Without MOE the hooks are the plain
// chunk's identities. Include after the Y binding; defines WROW (weight row), XROW / YROW (chunk
// row of a tile-local row), TILE_ROWS (rows of this tile), TILE_N0 (its first chunk row).
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
#else
bool moe_tile(uint t) { return true; }
#define WROW(m) (m)
#define YROW(n) (n)
#define XROW(n) (n)
#define TILE_ROWS T
#define TILE_N0(bn) (gl_WorkGroupID.y * (bn))
#endif

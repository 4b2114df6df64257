#version 450
#extension GL_GOOGLE_include_directive : require
// moe_group: the S slots of a wide chunk (row r's k chosen experts are slots r*k .. r*k+k-1) grouped
// by expert, so that an expert matmul (matmul_rows / matmul_rows_coop with MOE) reads each chosen
// expert's weights once per tile of BN of its slots instead of once per slot. One workgroup.
// Output G (u32): G[0] the tile count; G[1 + 3t ..] tile t = (expert, first, count): count <= BN
// slots order[first ..] of that expert; order[S] at G[GROUP_ORDER]. Tiles past G[0] are never
// read (their workgroups return at once), so the grid is fixed: S / BN + E tiles at most.
// Slots of one expert come in no set order (shared atomics): each slot's outputs depend only on
// its own row and expert, never on its neighbours in a tile.
// Bindings: 0 ids[S], 1 G. Spec: 0 wg size, 1 E, 2 S, 3 BN.
#define NO_WG_REDUCE
#include "common.glsl"

layout(constant_id = 1) const uint E = 8;
layout(constant_id = 2) const uint S = 1;
layout(constant_id = 3) const uint BN = 16;

layout(binding = 0) readonly buffer IB { uint ids[]; };
layout(binding = 1) buffer GB { uint g[]; };

const uint NT_MAX = (S + BN - 1) / BN + E;
const uint ORDER = 1 + 3 * NT_MAX;      // GROUP_ORDER in lowering/moe.py
const uint PER = (S + gl_WorkGroupSize.x - 1) / gl_WorkGroupSize.x;
shared uint count[E];
shared uint first[E];

void main() {
    const uint tid = gl_LocalInvocationID.x, WG = gl_WorkGroupSize.x;
    for (uint e = tid; e < E; e += WG) count[e] = 0;
    barrier();
    uint rank[PER];
    for (uint i = 0; i < PER; i++) {
        const uint s = tid + i * WG;
        rank[i] = s < S ? atomicAdd(count[min(ids[s], E - 1)], 1u) : 0u;
    }
    barrier();
    if (tid == 0) {
        // E and the tile count are small (hundreds): one invocation's scan costs less than a
        // parallel one's barriers
        uint at = 0, nt = 0;
        for (uint e = 0; e < E; e++) {
            first[e] = at;
            for (uint c = 0; c < count[e]; c += BN) {
                g[1 + 3 * nt] = e;
                g[2 + 3 * nt] = at + c;
                g[3 + 3 * nt] = min(BN, count[e] - c);
                nt++;
            }
            at += count[e];
        }
        g[0] = nt;
    }
    barrier();
    for (uint i = 0; i < PER; i++) {
        const uint s = tid + i * WG;
        if (s < S) g[ORDER + first[min(ids[s], E - 1)] + rank[i]] = s;
    }
}

"""A prompt chunk's fused MoE regions (fusion/rules_moe.py CHUNK_RULES) -> kernel calls: the
elementwise passes of the layer's per-op form folded into the kernels next to them, one dispatch
and one barrier fewer each. H200, Qwen3-30B-A3B, a 512-token chunk, per layer: silu_mul 15.6 µs
(a pass over 4096 x 768 floats), the residual add 7.9 µs.

MOE_MATMUL_SILU_MUL_CHUNK: the grouped gate matmul writes g; the grouped up matmul (GLU_SILU,
shaders/moe_rows.glsl) reads g at each element it stores and writes silu(g) * its sum as a, so u is
never written. silu_mul.comp's expression on the same floats: the bits of the per-op form. Only
where the slots are grouped (moe_group.group_rows): a narrower chunk runs the region's ops.
MOE_SUM_ADD_CHUNK: moe_sum with RES adds the residual as it stores (any width).
"""

from __future__ import annotations

from fusion.ir import Program
from fusion.region import Region
from vkdecode.lowering.calls import KernelCall, KernelCaps
from vkdecode.lowering.moe import moe_sum_call
from vkdecode.lowering.moe_group import grouped_matmul


def moe_matmul_silu_mul_chunk(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    r = region.roles
    gate = grouped_matmul(p, r["w_gate"], r["x"], r["ids"], r["g"], caps)
    if not gate:
        return None  # too few slots to group: per-slot matvecs and silu_mul (the region's ops)
    up = grouped_matmul(p, r["w_up"], r["x"], r["ids"], r["a"], caps, gate=r["g"])
    # the gate's calls bring the groups where nothing else does (a program without moe_topk)
    return gate + up[-1:]


def moe_sum_add_chunk(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall]:
    r = region.roles
    return [moe_sum_call(p, r["y"], r["sw"], r["s"], caps, res=r["r"])]

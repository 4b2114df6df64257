"""RMS_NORM_SILU_MUL_MATMUL_ADD -> kernel calls: Qwen3.5's linear-attention output (the delta rule's
o normed per head, gated by silu(z), then out_proj + the residual) as matmul_add.comp with define
GATED_NORM (shaders/gated_norm.glsl): the matmul_add calls of o, z and the norm weight bound after y.

Its calls stay matmul_add calls, so the peephole that lets a matmul_add also write the next norm's
inputs (norm_pre.py) applies to them as to any out projection.
"""

from __future__ import annotations

from dataclasses import replace

from fusion.ir import Program
from fusion.region import Region
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps
from vkdecode.lowering.matvec import matmul_add


def head_lanes(d: int, heads: int, wg: int) -> int:
    """Invocations summing one head's squares (gated_norm.glsl LANES): the workgroup spread over the
    heads in one round where it has lanes enough, at most one a unit (vec4, or element) of a head."""
    units = d // 4 if d % 4 == 0 else d
    return max(1, min(units, wg // heads))


def rms_norm_silu_mul_matmul_add(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """matmul_add's calls over x = o (row chunks included), each taking the heads' norms itself;
    None (the four ops' kernels) where its shared memory would not fit the device."""
    r = region.roles
    d = p.values[r["norm_w"]].numel
    heads = p.values[r["o"]].numel // d
    plain = replace(
        region, roles={"weight": r["weight"], "x": r["o"], "residual": r["residual"], "out": r["out"]}
    )
    calls = []
    for c in matmul_add(p, plain, caps):
        wg, _, _, rows = c.spec
        lanes = head_lanes(d, heads, wg)
        # gated_norm.glsl's arrays beside matvec.glsl's reduction (rows x wg floats)
        if 4 * (heads * (lanes + 1) + rows * wg) > caps.max_shared:
            return None
        calls.append(
            replace(
                c,
                bindings=c.bindings + (Binding(r["z"]), Binding(r["norm_w"])),
                spec=c.spec + (d, heads, lanes, float(region.attrs["eps"])),
                defines=c.defines + (("GATED_NORM", "1"),),
            )
        )
    return calls

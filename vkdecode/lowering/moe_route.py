"""A decode step's big MoE router and the chosen experts' gate/up as one region
(fusion.rules_moe RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL, gpt-oss's with bias rows and its clamped GLU):
the router's top-k moves into the gate/up kernel (shaders/moe_route.glsl, define MOE_ROUTE), one
dispatch fewer a layer. Apart from lowering/moe.py, whose op kernels lowering/ops.py imports: the
fallback here runs ops.
"""

from __future__ import annotations

from fusion.ir import Program
from fusion.region import Region
from fusion.rules_moe import ROUTER_ONE_WORKGROUP_MAX
from vkdecode.lowering.calls import KernelCall, KernelCaps, row_chunks
from vkdecode.lowering.moe import moe_matmul_silu_mul, rms_norm_matmul_moe_topk, router_logits_call
from vkdecode.lowering.ops import op_calls


def rms_norm_matmul_moe_topk_silu_mul(
    p: Program, region: Region, caps: KernelCaps
) -> list[KernelCall] | None:
    """A decode step's big router and the chosen experts' gate/up: rms_norm_matmul writing h and
    the logits, then the gate/up kernel taking the top-k itself (MOE_ROUTE): one dispatch fewer a
    layer. caps.moe_route < 0, or where that does not apply: the two regions' own calls. gpt-oss's
    form (RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP): the router's bias in rms_norm_matmul,
    the experts' bias rows and the clamped GLU in the gate/up kernel, as its two regions do."""
    r, a = region.roles, region.attrs
    biased = "b" in r
    router = Region(
        region.name,
        "RMS_NORM_MATMUL_BIAS_MOE_TOPK" if biased else "RMS_NORM_MATMUL_MOE_TOPK",
        [i for i in region.ops if p.ops[i].kind in ("rms_norm", "matmul", "add", "moe_topk")],
        [],
        [],
        {k: r[k] for k in ("x", "norm_w", "w", "b", "h", "logits", "ids", "weights") if k in r},
        {"eps": a["eps"], "k": a["k"], "norm": a["norm"]},
    )
    glu = Region(
        region.name,
        "MOE_MATMUL_BIAS_SWIGLU_CLAMP" if biased else "MOE_MATMUL_SILU_MUL",
        [i for i in region.ops if i not in router.ops],
        [],
        [],
        {"x": r["h"], **{k: r[k] for k in ("ids", "w_gate", "w_up", "b_gate", "b_up", "a") if k in r}},
        {k: a[k] for k in ("alpha", "limit") if k in a},
    )
    v = p.values[r["w"]]
    e = v.shape[0]
    big = v.numel > (caps.router_one_wg or ROUTER_ONE_WORKGROUP_MAX)
    if caps.moe_route >= 0 and not caps.router_ops and big and 4 * e <= caps.max_shared // 4:
        routed = moe_matmul_silu_mul(p, glu, caps, route=router)
        if routed is not None and len(row_chunks(v.dtype, *v.shape, caps)) == 1:
            return [router_logits_call(p, router, caps)] + routed

    def own(part: Region, fused) -> list[KernelCall]:
        return fused or [c for i in part.ops for c in op_calls(p, i, caps)]

    return own(router, rms_norm_matmul_moe_topk(p, router, caps)) + own(
        glu, moe_matmul_silu_mul(p, glu, caps)
    )

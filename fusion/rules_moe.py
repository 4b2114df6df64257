"""The mixture-of-experts rules (fusion/ir.py moe_*): the router with the norm before it, the chosen
experts' gate/up with SwiGLU, their down projections with the weighted sum and the residual add.
Listed in DEFAULT_RULES (rules.py) ahead of the dense projection rules anchored at the same ops;
MOE_MATMUL_SILU_MUL_CHUNK and MOE_SUM_ADD_CHUNK are a prompt chunk's (fusion.rules.CHUNK_RULES).
"""

from __future__ import annotations

from fusion.ir import Program
from fusion.pattern import Match, op
from fusion.region import Region, eps_of, match_region, rule, same_weights, shape_of, whole_norm


def _lower_router(m: Match, p: Program) -> Region:
    c = m.captures
    topk = p.ops[p.producers()[c["ids"]]].attrs
    return match_region(
        m,
        {k: c[k] for k in ("x", "norm_w", "w", "b", "h", "ids", "weights") if k in c},
        {"eps": eps_of(m, p, "h"), "k": topk["k"], "norm": bool(topk.get("norm"))},
    )


# the normed h is exported: the experts' gate/up read it
RMS_NORM_MATMUL_MOE_TOPK = rule(
    "RMS_NORM_MATMUL_MOE_TOPK",
    op("rms_norm", ("x", "norm_w"), ("h",), where=whole_norm),
    op("matmul", ("w", "h"), ("logits",)),
    op("moe_topk", ("logits",), ("ids", "weights")),
    exports=("h", "ids", "weights"),
    lower=_lower_router,
)

# gpt-oss: the router's bias row added to the logits before the top-k (the same kernels, BIAS)
RMS_NORM_MATMUL_BIAS_MOE_TOPK = rule(
    "RMS_NORM_MATMUL_BIAS_MOE_TOPK",
    op("rms_norm", ("x", "norm_w"), ("h",), where=whole_norm),
    op("matmul", ("w", "h"), ("logits",)),
    op("add", ("logits", "b"), ("lb",), kinds={"b": "weight"}, commutative=True),
    op("moe_topk", ("lb",), ("ids", "weights")),
    exports=("h", "ids", "weights"),
    lower=_lower_router,
    # one bias row of one logits row (a chunk's rows run the ops)
    check=lambda m, p: shape_of(p, m.captures["b"]) == shape_of(p, m.captures["lb"]),
)


def _lower_moe_glu(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(m, {k: c[k] for k in ("x", "ids", "w_gate", "w_up", "g", "a")}, {})


# the chosen experts' gate and up and their SwiGLU (a decode step's rule and a chunk's)
_MOE_GLU_OPS = (
    op("moe_matmul", ("w_gate", "x", "ids"), ("g",)),
    op("moe_matmul", ("w_up", "x", "ids"), ("u",)),
    op("silu_mul", ("g", "u"), ("a",)),
)
MOE_MATMUL_SILU_MUL = rule(
    "MOE_MATMUL_SILU_MUL",
    *_MOE_GLU_OPS,
    exports=("a",),
    lower=_lower_moe_glu,
    # one x for every slot (the decode step; a chunk's rows run the ops' kernels)
    check=lambda m, p: (
        same_weights(m, p, "w_gate", "w_up")
        and shape_of(p, m.captures["x"])[0] == shape_of(p, m.captures["w_gate"])[2]
    ),
)


def _lower_moe_down(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(m, {k: c[k] for k in ("w", "x", "ids", "b", "sw", "r", "s") if k in c}, {})


MOE_MATMUL_SUM_ADD = rule(
    "MOE_MATMUL_SUM_ADD",
    op("moe_matmul", ("w", "x", "ids"), ("y",)),
    op("moe_sum", ("y", "sw"), ("o",)),
    op("add", ("o", "r"), ("s",), kinds={"r": "activation"}, commutative=True),
    exports=("s",),
    lower=_lower_moe_down,
    # one output row (the decode step)
    check=lambda m, p: shape_of(p, m.captures["s"])[0] == shape_of(p, m.captures["w"])[1],
)

# gpt-oss's down: each chosen expert's bias row added to its output before the weighting,
# sum_j w_j (W_j x_j + b_j) + r (moe_matmul_sum_add.comp with BIAS)
MOE_MATMUL_BIAS_SUM_ADD = rule(
    "MOE_MATMUL_BIAS_SUM_ADD",
    op("moe_matmul", ("w", "x", "ids"), ("y",)),
    op("moe_bias", ("y", "b", "ids"), ("yb",)),
    op("moe_sum", ("yb", "sw"), ("o",)),
    op("add", ("o", "r"), ("s",), kinds={"r": "activation"}, commutative=True),
    exports=("s",),
    lower=_lower_moe_down,
    check=MOE_MATMUL_SUM_ADD.check,  # one output row (the decode step)
)


def _lower_moe_glu_clamp(m: Match, p: Program) -> Region:
    c = m.captures
    glu = p.ops[p.producers()[c["a"]]].attrs
    roles = {k: c[k] for k in ("x", "ids", "w_gate", "w_up", "b_gate", "b_up", "a")}
    return match_region(m, roles, {"alpha": float(glu["alpha"]), "limit": float(glu["limit"])})


# gpt-oss's gate/up: the chosen experts' gate and up matvecs, their bias rows and the clamped GLU
# in one kernel (fused_swiglu.glsl with MOE, BIAS, GLU_CLAMP), as MOE_MATMUL_SILU_MUL for SwiGLU
MOE_MATMUL_BIAS_SWIGLU_CLAMP = rule(
    "MOE_MATMUL_BIAS_SWIGLU_CLAMP",
    op("moe_matmul", ("w_gate", "x", "ids"), ("g0",)),
    op("moe_bias", ("g0", "b_gate", "ids"), ("g",)),
    op("moe_matmul", ("w_up", "x", "ids"), ("u0",)),
    op("moe_bias", ("u0", "b_up", "ids"), ("u",)),
    op("swiglu_clamp", ("g", "u"), ("a",)),
    exports=("a",),
    lower=_lower_moe_glu_clamp,
    check=MOE_MATMUL_SILU_MUL.check,  # one x for every slot (the decode step)
)


def _lower_moe_bias(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(m, {k: c[k] for k in ("w", "x", "ids", "b", "o")}, {})


# gpt-oss: each chosen expert's matvec and its bias row, added as the rows are stored (moe_matmul
# with BIAS). A chunk's wide slots take the grouped matmul instead (the lowering declines them).
MOE_MATMUL_BIAS = rule(
    "MOE_MATMUL_BIAS",
    op("moe_matmul", ("w", "x", "ids"), ("y",)),
    op("moe_bias", ("y", "b", "ids"), ("o",)),
    exports=("o",),
    lower=_lower_moe_bias,
)

# Routers of more elements (experts x hidden) than this run on the multi-workgroup rms_norm_matmul,
# not in one workgroup with their top-k (vkdecode/lowering/moe.py, caps.router_one_wg): in a decode
# step their top-k goes into the chosen experts' gate/up kernel instead of a dispatch of its own.
ROUTER_ONE_WORKGROUP_MAX = 1 << 15


def _lower_route_glu(m: Match, p: Program) -> Region:
    c = m.captures
    topk = p.ops[p.producers()[c["ids"]]].attrs
    attrs = {"eps": eps_of(m, p, "h"), "k": topk["k"], "norm": bool(topk.get("norm"))}
    if "b_gate" in c:  # gpt-oss: its clamped GLU's constants
        glu = p.ops[p.producers()[c["a"]]].attrs
        attrs.update(alpha=float(glu["alpha"]), limit=float(glu["limit"]))
    keys = ("x", "norm_w", "w", "b", "h", "logits", "ids", "weights", "w_gate", "w_up", "b_gate", "b_up")
    roles = {k: c[k] for k in (*keys, "a") if k in c}
    if "b" in c:  # the logits the top-k ranks: the router's matvec plus its bias row
        roles["logits"] = c["lb"]
    return match_region(m, roles, attrs)


def _route_glu_applies(m: Match, p: Program) -> bool:
    """A decode step's (one row of slots) router too big for one workgroup, and its gate/up."""
    c = m.captures
    e, k = shape_of(p, c["w"])
    topk = p.ops[p.producers()[c["ids"]]].attrs
    return (
        e * k > ROUTER_ONE_WORKGROUP_MAX
        and p.values[c["ids"]].numel == int(topk["k"])
        and same_weights(m, p, "w_gate", "w_up")
        and shape_of(p, c["h"])[0] == shape_of(p, c["w_gate"])[2]
    )


# The router and the chosen experts' gate/up + SwiGLU: rms_norm_matmul (h and the logits), then
# the gate/up kernel ranking the logits itself (shaders/moe_route.glsl). h is exported: a shared
# expert (qwen2moe) reads it too.
RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL = rule(
    "RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL",
    op("rms_norm", ("x", "norm_w"), ("h",), where=whole_norm),
    op("matmul", ("w", "h"), ("logits",)),
    op("moe_topk", ("logits",), ("ids", "weights")),
    op("moe_matmul", ("w_gate", "h", "ids"), ("g",)),
    op("moe_matmul", ("w_up", "h", "ids"), ("u",)),
    op("silu_mul", ("g", "u"), ("a",)),
    exports=("h", "ids", "weights", "a"),
    lower=_lower_route_glu,
    check=_route_glu_applies,
)

# gpt-oss's form of it: the router's bias row (rms_norm_matmul's bias), the experts' bias rows and
# the clamped GLU (the gate/up kernel of MOE_MATMUL_BIAS_SWIGLU_CLAMP, ranking the logits itself)
RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP = rule(
    "RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP",
    *RMS_NORM_MATMUL_BIAS_MOE_TOPK.pattern.items,
    op("moe_matmul", ("w_gate", "h", "ids"), ("g0",)),
    op("moe_bias", ("g0", "b_gate", "ids"), ("g",)),
    op("moe_matmul", ("w_up", "h", "ids"), ("u0",)),
    op("moe_bias", ("u0", "b_up", "ids"), ("u",)),
    op("swiglu_clamp", ("g", "u"), ("a",)),
    exports=("h", "ids", "weights", "a"),
    lower=_lower_route_glu,
    check=lambda m, p: RMS_NORM_MATMUL_BIAS_MOE_TOPK.check(m, p) and _route_glu_applies(m, p),
)

MOE_RULES = (
    RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL,
    RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP,
    RMS_NORM_MATMUL_MOE_TOPK,
    RMS_NORM_MATMUL_BIAS_MOE_TOPK,
    MOE_MATMUL_SILU_MUL,
    MOE_MATMUL_SUM_ADD,
    MOE_MATMUL_BIAS_SUM_ADD,
    MOE_MATMUL_BIAS_SWIGLU_CLAMP,
    MOE_MATMUL_BIAS,
)


# -- a prompt chunk's MoE layer (fusion/chunk.py; CHUNK_RULES, not in DEFAULT_RULES): its grouped
# expert matmuls stay, the elementwise passes between them go into them. H200, Qwen3-30B-A3B, a
# 512-token chunk: per layer 15.6 µs of silu_mul (4096 x 768 floats) and 7.9 of the residual add.


def _chunk_glu_applies(m: Match, p: Program) -> bool:
    return "chunk_rows" in p.meta and same_weights(m, p, "w_gate", "w_up")


# the grouped gate matmul writes g (materialised: every activation has its buffer), the grouped up
# matmul stores silu(g) * its sum as a (lowering/moe_chunk.py); silu only: no MoE arch here is GeGLU
MOE_MATMUL_SILU_MUL_CHUNK = rule(
    "MOE_MATMUL_SILU_MUL_CHUNK",
    *_MOE_GLU_OPS,
    exports=("a",),
    lower=_lower_moe_glu,
    check=_chunk_glu_applies,
)


def _chunk_sum_add_applies(m: Match, p: Program) -> bool:
    c = m.captures
    return "chunk_rows" in p.meta and p.values[c["r"]].numel == p.values[c["s"]].numel


def _lower_moe_sum_add(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(m, {k: c[k] for k in ("y", "sw", "r", "s")}, {})


# the experts' weighted sum and the add it feeds (the residual; qwen2moe: the shared expert's
# output) in one moe_sum pass, at any chunk width
MOE_SUM_ADD_CHUNK = rule(
    "MOE_SUM_ADD_CHUNK",
    op("moe_sum", ("y", "sw"), ("o",)),
    op("add", ("o", "r"), ("s",), kinds={"r": "activation"}, commutative=True),
    exports=("s",),
    lower=_lower_moe_sum_add,
    check=_chunk_sum_add_applies,
)

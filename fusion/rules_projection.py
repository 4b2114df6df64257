"""The projection rules: a matvec with the norm before it, the GLU after it, its bias or the residual
add it feeds folded into one kernel. Numbered by their place in DEFAULT_RULES (rules.py); the
prompt-chunk forms (chunk_rules.py) derive from these.
"""

from __future__ import annotations

from fusion.ir import Program
from fusion.pattern import Match, op, optional, repeat
from fusion.region import Region, Rule, eps_of, match_region, rule, same_weights, shape_of, whole_norm

# -- 1. final norm, lm_head, argmax: the next token stays on the GPU --


def _lower_norm_matmul_argmax(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(
        m,
        {"x": c["x"], "norm_w": c["norm_w"], "weight": c["w"], "logits": c["logits"], "token": c["token"]},
        {"eps": eps_of(m, p, "h"), "dtype": p.values[c["w"]].dtype},
    )


RMS_NORM_MATMUL_ARGMAX = rule(
    "RMS_NORM_MATMUL_ARGMAX",
    op("rms_norm", ("x", "norm_w"), ("h",), where=whole_norm),
    op("matmul", ("w", "h"), ("logits",)),
    op("argmax", ("logits",), ("token",)),
    exports=("logits", "token"),
    lower=_lower_norm_matmul_argmax,
)


# -- 2. norm folded into the gate/up matvec, SwiGLU (or Gemma's GeGLU) in the epilogue: one kernel --


def _lower_norm_glu(act: str):
    def lower(m: Match, p: Program) -> Region:
        c = m.captures
        return match_region(
            m,
            {"x": c["x"], "norm_w": c["norm_w"], "w_gate": c["w_gate"], "w_up": c["w_up"], "out": c["a"]},
            {"eps": eps_of(m, p, "h"), "dtype": p.values[c["w_gate"]].dtype, "act": act},
        )

    return lower


def _norm_glu_rule(act: str) -> Rule:
    """RMS_NORM_MATMUL_SILU_MUL, and its GeGLU variant RMS_NORM_MATMUL_GELU_MUL (same kernel, one define)."""
    name = f"RMS_NORM_MATMUL_{act.upper()}_MUL"
    return rule(
        name,
        op("rms_norm", ("x", "norm_w"), ("h",), where=whole_norm),
        op("matmul", ("w_gate", "h"), ("g",)),
        op("matmul", ("w_up", "h"), ("u",)),
        op(f"{act}_mul", ("g", "u"), ("a",)),
        exports=("a",),
        lower=_lower_norm_glu(act),
        check=lambda m, p: same_weights(m, p, "w_gate", "w_up"),
    )


RMS_NORM_MATMUL_SILU_MUL = _norm_glu_rule("silu")
RMS_NORM_MATMUL_GELU_MUL = _norm_glu_rule("gelu")


def _lower_norm_bias_swiglu(m: Match, p: Program) -> Region:
    region = _lower_norm_glu("silu")(m, p)
    region.roles.update(b_gate=m.captures["b_gate"], b_up=m.captures["b_up"])
    return region


# Llama mlp_bias: the gate and up biases sit between the matvecs and SwiGLU, added in its epilogue
RMS_NORM_MATMUL_BIAS_SILU_MUL = rule(
    "RMS_NORM_MATMUL_BIAS_SILU_MUL",
    op("rms_norm", ("x", "norm_w"), ("h",), where=whole_norm),
    op("matmul", ("w_gate", "h"), ("g",)),
    op("add", ("g", "b_gate"), ("gb",), kinds={"b_gate": "weight"}, commutative=True),
    op("matmul", ("w_up", "h"), ("u",)),
    op("add", ("u", "b_up"), ("ub",), kinds={"b_up": "weight"}, commutative=True),
    op("silu_mul", ("gb", "ub"), ("a",)),
    exports=("a",),
    lower=_lower_norm_bias_swiglu,
    check=lambda m, p: same_weights(m, p, "w_gate", "w_up"),
)


# -- 3. norm feeding every projection that reads it (q/k/v), each with its optional bias --


def _lower_norm_matmul(m: Match, p: Program) -> Region:
    c = m.captures
    outs = [b if b is not None else y for y, b in zip(c["y"], c.get("yb", [None] * len(c["y"])))]
    dtypes = [p.values[w].dtype for w in c["w"]]
    return match_region(
        m,
        {
            "x": c["x"],
            "norm_w": c["norm_w"],
            "weights": list(c["w"]),
            "biases": list(c.get("b", [None] * len(c["w"]))),
            "outs": outs,
        },
        {"eps": eps_of(m, p, "h"), "dtypes": dtypes, "rows": [shape_of(p, w)[0] for w in c["w"]]},
    )


RMS_NORM_MATMUL = rule(
    "RMS_NORM_MATMUL",
    op("rms_norm", ("x", "norm_w"), ("h",), where=whole_norm),
    repeat(
        op("matmul", ("w", "h"), ("y",)),
        optional(op("add", ("y", "b"), ("yb",), kinds={"b": "weight"}, commutative=True)),
        exports=(("yb", "y"),),
    ),
    lower=_lower_norm_matmul,
)


# -- 5. output / down projection (+ its bias) accumulating into the residual --


def _lower_matmul_add(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(
        m,
        {"weight": c["w"], "x": c["x"], "residual": c["r"], "out": c["s"], "bias": c.get("b")},
        {"dtype": p.values[c["w"]].dtype},
    )


# Llama / Qwen3 with attention_bias (o-projection), Llama with mlp_bias (down projection): the
# bias add sits between the matvec and the residual add and is folded into the same epilogue.
MATMUL_BIAS_ADD = rule(
    "MATMUL_BIAS_ADD",
    op("matmul", ("w", "x"), ("y",)),
    op("add", ("y", "b"), ("yb",), kinds={"b": "weight"}, commutative=True),
    op("add", ("yb", "r"), ("s",), kinds={"r": "activation"}, commutative=True),
    exports=("s",),
    lower=_lower_matmul_add,
)


def _lower_norm_gate_matmul_add(m: Match, p: Program) -> Region:
    c = m.captures  # named as the kernel's roles
    roles = {k: c[k] for k in ("o", "norm_w", "z", "weight", "residual", "out")}
    return match_region(m, roles, {"eps": eps_of(m, p, "n"), "dtype": p.values[c["weight"]].dtype})


# Qwen3.5's linear-attention output: the per-head norm of the delta rule's output o, gated by
# silu(z), feeds out_proj and the residual add. The kernel loads its x as silu(z) * (o / rms * w),
# each workgroup taking the heads' rms first, so the norm and the gate cost no dispatch of their own.
# silu_mul is not commutative: silu of z, the first input, as the model builds it.
RMS_NORM_SILU_MUL_MATMUL_ADD = rule(
    "RMS_NORM_SILU_MUL_MATMUL_ADD",
    op("rms_norm", ("o", "norm_w"), ("n",)),  # over o's heads (the whole vector: one head)
    op("silu_mul", ("z", "n"), ("g",)),
    op("matmul", ("weight", "g"), ("y",)),
    op("add", ("y", "residual"), ("out",), kinds={"residual": "activation"}, commutative=True),
    exports=("out",),
    lower=_lower_norm_gate_matmul_add,
)


def _lower_matmul_sigmoid_add(m: Match, p: Program) -> Region:
    c = m.captures
    roles = {k: c[k] for k in ("weight", "x", "gate", "residual", "out")}
    return match_region(m, roles, {"dtype": p.values[c["weight"]].dtype})


# A gated shared expert (Qwen2-MoE, Qwen3.5-MoE, Qwen3-Next): its down projection scaled by the
# sigmoid of a one-float gate logit and added to the residual. The kernel stores r + sigmoid(g) * W x
# in its epilogue, so the scale and the add cost no dispatch and no barrier of their own.
MATMUL_SIGMOID_SCALE_ADD = rule(
    "MATMUL_SIGMOID_SCALE_ADD",
    op("matmul", ("weight", "x"), ("y",)),
    op("sigmoid_scale", ("gate", "y"), ("scaled",)),
    op("add", ("scaled", "residual"), ("out",), kinds={"residual": "activation"}, commutative=True),
    exports=("out",),
    lower=_lower_matmul_sigmoid_add,
    # one gate for the whole vector (a decode step; a chunk's rows have one each)
    check=lambda m, p: p.values[m.captures["gate"]].numel == 1,
)


# Qwen3.5's full-attention output times sigmoid of the gate half of q_proj, element by element,
# before the o projection: the kernel loads its x as x * sigmoid(g), so the scale needs no dispatch.
SIGMOID_SCALE_MATMUL_ADD = rule(
    "SIGMOID_SCALE_MATMUL_ADD",
    op("sigmoid_scale", ("gate", "x"), ("gx",)),
    op("matmul", ("weight", "gx"), ("y",)),
    op("add", ("y", "residual"), ("out",), kinds={"residual": "activation"}, commutative=True),
    exports=("out",),
    lower=_lower_matmul_sigmoid_add,
    # a gate an element of one x row (a decode step)
    check=lambda m, p: p.values[m.captures["gate"]].numel == shape_of(p, m.captures["weight"])[1],
)


MATMUL_ADD = rule(
    "MATMUL_ADD",
    op("matmul", ("w", "x"), ("y",)),
    # an activation, not a bias weight: this is the residual stream
    op("add", ("y", "r"), ("s",), kinds={"r": "activation"}, commutative=True),
    exports=("s",),
    lower=_lower_matmul_add,
)


# -- 6. gate and up projections + SwiGLU / GeGLU in one matvec, when the norm could not be folded in --


def _lower_glu(act: str):
    def lower(m: Match, p: Program) -> Region:
        c = m.captures
        return match_region(
            m,
            {"x": c["x"], "w_gate": c["w_gate"], "w_up": c["w_up"], "out": c["a"]},
            {"dtype": p.values[c["w_gate"]].dtype, "act": act},
        )

    return lower


def _glu_rule(act: str) -> Rule:
    name = f"MATMUL_{act.upper()}_MUL"
    return rule(
        name,
        op("matmul", ("w_gate", "x"), ("g",)),
        op("matmul", ("w_up", "x"), ("u",)),
        op(f"{act}_mul", ("g", "u"), ("a",)),
        exports=("a",),
        lower=_lower_glu(act),
        check=lambda m, p: same_weights(m, p, "w_gate", "w_up"),
    )


MATMUL_SILU_MUL = _glu_rule("silu")
MATMUL_GELU_MUL = _glu_rule("gelu")

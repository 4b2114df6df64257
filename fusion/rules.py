"""The decode fusion rules, as data: Rule(name, pattern, lower, check), in priority order.

`lower(match, program) -> Region | None` names the roles the kernel lowering reads; `check` may
refuse a match (through pattern.why_illegal, the one legality predicate). Adding a rule is one
entry in DEFAULT_RULES (plus its shader and its test).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from fusion.ir import Program
from fusion.pattern import Match, Pattern, op, optional, pattern, repeat


@dataclass
class Region:
    name: str
    rule: str | None  # None: a single unmatched op
    ops: list[int]  # indices into program.ops, program order
    inputs: list[str]  # values read and not produced inside (weights and step included)
    outputs: list[str]  # values produced inside and visible outside (+ written state)
    roles: dict = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: Pattern
    lower: Callable[[Match, Program], Region | None]
    check: Callable[[Match, Program], bool] | None = None


def single_op_region(program: Program, i: int) -> Region:
    o = program.ops[i]
    return Region(
        o.kind.upper(),
        None,
        [i],
        list(dict.fromkeys(o.inputs)),
        list(o.outputs),
        {"inputs": list(o.inputs), "outputs": list(o.outputs)},
        dict(o.attrs),
    )


def _region(m: Match, roles: dict, attrs: dict) -> Region:
    """The region of a match, named after its rule (a pattern carries its rule's name)."""
    return Region(m.pattern, m.pattern, list(m.ops), list(m.inputs), list(m.exports), roles, attrs)


def rule(name: str, *items, lower, exports=(), check=None) -> Rule:
    """A rule, its name written once: the pattern and every region it lowers to carry it."""
    return Rule(name, pattern(name, *items, exports=exports), lower, check)


# -- predicates --


def _shape(p: Program, name: str):
    return p.values[name].shape


def whole_norm(o, p: Program) -> bool:
    """rms_norm over the whole vector (weight as long as x): the form a matvec can fold in."""
    return _shape(p, o.inputs[1])[0] == _shape(p, o.inputs[0])[0]


def _same_weights(m: Match, p: Program, a: str, b: str) -> bool:
    wa, wb = p.values[m.captures[a]], p.values[m.captures[b]]
    return wa.dtype == wb.dtype and wa.shape == wb.shape


def _eps(m: Match, p: Program, out: str) -> float:
    return p.ops[p.producers()[m.captures[out]]].attrs["eps"]


def _op_attrs(m: Match, p: Program, out: str) -> dict:
    return dict(p.ops[p.producers()[m.captures[out]]].attrs)


# -- 1. final norm, lm_head, argmax: the next token stays on the GPU --


def _lower_norm_matmul_argmax(m: Match, p: Program) -> Region:
    c = m.captures
    return _region(
        m,
        {"x": c["x"], "norm_w": c["norm_w"], "weight": c["w"], "logits": c["logits"], "token": c["token"]},
        {"eps": _eps(m, p, "h"), "dtype": p.values[c["w"]].dtype},
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
        return _region(
            m,
            {"x": c["x"], "norm_w": c["norm_w"], "w_gate": c["w_gate"], "w_up": c["w_up"], "out": c["a"]},
            {"eps": _eps(m, p, "h"), "dtype": p.values[c["w_gate"]].dtype, "act": act},
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
        check=lambda m, p: _same_weights(m, p, "w_gate", "w_up"),
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
    check=lambda m, p: _same_weights(m, p, "w_gate", "w_up"),
)


# -- 3. norm feeding every projection that reads it (q/k/v), each with its optional bias --


def _lower_norm_matmul(m: Match, p: Program) -> Region:
    c = m.captures
    outs = [b if b is not None else y for y, b in zip(c["y"], c.get("yb", [None] * len(c["y"])))]
    dtypes = [p.values[w].dtype for w in c["w"]]
    return _region(
        m,
        {
            "x": c["x"],
            "norm_w": c["norm_w"],
            "weights": list(c["w"]),
            "biases": list(c.get("b", [None] * len(c["w"]))),
            "outs": outs,
        },
        {"eps": _eps(m, p, "h"), "dtypes": dtypes, "rows": [_shape(p, w)[0] for w in c["w"]]},
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


# -- 4. (per-head q/k norm,) RoPE, KV-cache write and the attention that reads it --


def _lower_attention(m: Match, p: Program) -> Region:
    c = m.captures
    qk_norm = "q_norm_w" in c
    roles = {
        "q": c["q"],
        "k": c["k"],
        "v": c["v"],
        "step": c["step"],
        "k_cache": c["k_cache"],
        "v_cache": c["v_cache"],
        "out": c["o"],
        "freqs": c["freqs"],
    }
    attrs = _op_attrs(m, p, "o")  # window (sliding layers) comes with the attention's attrs
    attrs.update(layout=_op_attrs(m, p, "qr")["layout"])
    if qk_norm:
        roles.update(q_norm_w=c["q_norm_w"], k_norm_w=c["k_norm_w"])
        attrs["eps"] = _eps(m, p, "qn")
    return _region(m, roles, attrs)


def _attention_shapes(m: Match, p: Program) -> bool:
    """RoPE of q and k must agree with the attention's heads, one fused kernel reads all three;
    q/k norms (when matched) normalise each head: a weight of head_dim elements."""
    a, rq, rk = (_op_attrs(m, p, n) for n in ("o", "qr", "kr"))
    norms = [m.captures[w] for w in ("q_norm_w", "k_norm_w") if m.captures.get(w) is not None]
    if any(_shape(p, w) != (a["head_dim"],) for w in norms):
        return False
    return (
        rq["n_heads"] == a["n_heads"]
        and rk["n_heads"] == a["n_kv_heads"]
        and rq["head_dim"] == rk["head_dim"] == a["head_dim"]
        and rq["layout"] == rk["layout"]
    )  # one table: both ropes capture the same `freqs`


# written state is exported: the caches live on across steps
_ATTN_TAIL = (
    op("attention", ("qr", "k_cache", "v_cache", "step"), ("o",)),
    op("kv_write", ("kr", "v", "step"), ("k_cache", "v_cache")),
)
QK_NORM_ROPE_KV_WRITE_ATTENTION = rule(
    "QK_NORM_ROPE_KV_WRITE_ATTENTION",
    # per head, and with a single (kv) head that is the whole vector: _attention_shapes checks
    # that the weight is one head long
    op("rms_norm", ("q", "q_norm_w"), ("qn",)),
    op("rope", ("qn", "step", "freqs"), ("qr",)),
    *_ATTN_TAIL,
    op("rope", ("kn", "step", "freqs"), ("kr",)),
    op("rms_norm", ("k", "k_norm_w"), ("kn",)),
    exports=("o", "k_cache", "v_cache"),
    lower=_lower_attention,
    check=_attention_shapes,
)

ROPE_KV_WRITE_ATTENTION = rule(
    "ROPE_KV_WRITE_ATTENTION",
    op("rope", ("q", "step", "freqs"), ("qr",)),
    *_ATTN_TAIL,
    op("rope", ("k", "step", "freqs"), ("kr",)),
    exports=("o", "k_cache", "v_cache"),
    lower=_lower_attention,
    check=_attention_shapes,
)


# -- 5. output / down projection (+ its bias) accumulating into the residual --


def _lower_matmul_add(m: Match, p: Program) -> Region:
    c = m.captures
    return _region(
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
        return _region(
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
        check=lambda m, p: _same_weights(m, p, "w_gate", "w_up"),
    )


MATMUL_SILU_MUL = _glu_rule("silu")
MATMUL_GELU_MUL = _glu_rule("gelu")


# -- 7. residual add and the next norm in one pass (new residual and normed output) --


def _lower_add_norm(m: Match, p: Program) -> Region:
    c = m.captures
    return _region(
        m,
        {"a": c["a"], "b": c["b"], "norm_w": c["norm_w"], "sum": c["s"], "out": c["n"]},
        {"eps": _eps(m, p, "n")},
    )


ADD_RMS_NORM = rule(
    "ADD_RMS_NORM",
    op("add", ("a", "b"), ("s",)),
    op("rms_norm", ("s", "norm_w"), ("n",), where=whole_norm),
    exports=("s", "n"),
    lower=_lower_add_norm,
)


# -- 8. Gemma's sandwich norm: the block output normed, then added to the residual (one pass).
# Anchored at the norm, which comes before the add in program order, so ADD_RMS_NORM (anchored at
# the add) cannot take the add and leave the next pre-norm unfoldable into its matvec.


def _lower_norm_add(m: Match, p: Program) -> Region:
    c = m.captures
    return _region(
        m, {"x": c["x"], "norm_w": c["norm_w"], "residual": c["r"], "sum": c["s"]}, {"eps": _eps(m, p, "n")}
    )


RMS_NORM_ADD = rule(
    "RMS_NORM_ADD",
    op("rms_norm", ("x", "norm_w"), ("n",), where=whole_norm),
    op("add", ("n", "r"), ("s",), kinds={"r": "activation"}, commutative=True),
    exports=("s",),
    lower=_lower_norm_add,
)


DEFAULT_RULES: tuple[Rule, ...] = (
    RMS_NORM_MATMUL_ARGMAX,
    RMS_NORM_MATMUL_SILU_MUL,
    RMS_NORM_MATMUL_BIAS_SILU_MUL,
    RMS_NORM_MATMUL_GELU_MUL,
    RMS_NORM_MATMUL,
    QK_NORM_ROPE_KV_WRITE_ATTENTION,
    ROPE_KV_WRITE_ATTENTION,
    MATMUL_BIAS_ADD,
    MATMUL_ADD,
    MATMUL_SILU_MUL,
    MATMUL_GELU_MUL,
    ADD_RMS_NORM,
    RMS_NORM_ADD,
)


def rules_by_name(names, rules=DEFAULT_RULES) -> list[Rule]:
    """The named subset of `rules`, keeping their priority order."""
    names = list(names)
    known = {r.name for r in rules}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise KeyError(f"unknown rule(s) {unknown}; known: {', '.join(r.name for r in rules)}")
    return [r for r in rules if r.name in names]

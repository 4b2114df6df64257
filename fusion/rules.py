"""The decode fusion rules, as data: Rule(name, pattern, lower, check), in priority order.

`lower(match, program) -> Region | None` names the roles the kernel lowering reads; `check` may
refuse a match (through pattern.why_illegal, the one legality predicate). Adding a rule is one
entry in DEFAULT_RULES (plus its shader and its test). This module is the catalogue: the attention
and residual-norm rules live here, the projection rules in rules_projection.py, Region and Rule in
region.py; every rule, Region, Rule and single_op_region can be imported from here.
"""

from __future__ import annotations

from fusion.ir import Program
from fusion.pattern import Match, op
from fusion.region import (
    Region,
    Rule,
    chunk_norm,
    eps_of,
    match_region,
    op_attrs,
    row_norm,
    rule,
    shape_of,
    single_op_region,  # noqa: F401  (re-exported: fusion.rules is the catalogue)
    whole_norm,
)
from fusion.rules_moe import (
    MOE_MATMUL_BIAS,
    MOE_MATMUL_BIAS_SUM_ADD,
    MOE_MATMUL_BIAS_SWIGLU_CLAMP,
    MOE_MATMUL_SILU_MUL,
    MOE_MATMUL_SILU_MUL_CHUNK,
    MOE_MATMUL_SUM_ADD,
    MOE_SUM_ADD_CHUNK,
    RMS_NORM_MATMUL_BIAS_MOE_TOPK,
    RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP,
    RMS_NORM_MATMUL_MOE_TOPK,
    RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL,
)
from fusion.rules_projection import (
    MATMUL_ADD,
    MATMUL_BIAS_ADD,
    MATMUL_GELU_MUL,
    MATMUL_SIGMOID_SCALE_ADD,
    MATMUL_SILU_MUL,
    RMS_NORM_MATMUL,
    RMS_NORM_MATMUL_ARGMAX,
    RMS_NORM_MATMUL_BIAS_SILU_MUL,
    RMS_NORM_MATMUL_GELU_MUL,
    RMS_NORM_MATMUL_SILU_MUL,
    RMS_NORM_SILU_MUL_MATMUL_ADD,
    SIGMOID_SCALE_MATMUL_ADD,
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
    attrs = op_attrs(m, p, "o")  # window (sliding layers) comes with the attention's attrs
    attrs.update(layout=op_attrs(m, p, "qr")["layout"])
    if qk_norm:
        roles.update(q_norm_w=c["q_norm_w"], k_norm_w=c["k_norm_w"])
        attrs["eps"] = eps_of(m, p, "qn")
    if c.get("sinks"):  # gpt-oss: the attention's optional sinks input
        roles["sinks"] = c["sinks"]
    return match_region(m, roles, attrs)


def _attention_shapes(m: Match, p: Program) -> bool:
    """RoPE of q and k must agree with the attention's heads, one fused kernel reads all three;
    q/k norms (when matched) normalise each head: a weight of head_dim elements."""
    a, rq, rk = (op_attrs(m, p, n) for n in ("o", "qr", "kr"))
    norms = [m.captures[w] for w in ("q_norm_w", "k_norm_w") if m.captures.get(w) is not None]
    if any(shape_of(p, w) != (a["head_dim"],) for w in norms):
        return False
    return (
        rq["n_heads"] == a["n_heads"]
        and rk["n_heads"] == a["n_kv_heads"]
        and rq["head_dim"] == rk["head_dim"] == a["head_dim"]
        and rq["layout"] == rk["layout"]
    )  # one table: both ropes capture the same `freqs`


# written state is exported: the caches live on across steps
_ATTN_TAIL = (
    op("attention", ("qr", "k_cache", "v_cache", "step"), ("o",), optional_inputs=("sinks",)),
    op("kv_write", ("kr", "v", "step"), ("k_cache", "v_cache")),
)
_QK_NORM_ATTENTION_OPS = (
    # per head, and with a single (kv) head that is the whole vector: _attention_shapes checks
    # that the weight is one head long
    op("rms_norm", ("q", "q_norm_w"), ("qn",)),
    op("rope", ("qn", "step", "freqs"), ("qr",)),
    *_ATTN_TAIL,
    op("rope", ("kn", "step", "freqs"), ("kr",)),
    op("rms_norm", ("k", "k_norm_w"), ("kn",)),
)
_ROPE_ATTENTION_OPS = (
    op("rope", ("q", "step", "freqs"), ("qr",)),
    *_ATTN_TAIL,
    op("rope", ("k", "step", "freqs"), ("kr",)),
)


def _attention_rule(name: str, ops: tuple) -> Rule:
    return rule(
        name, *ops, exports=("o", "k_cache", "v_cache"), lower=_lower_attention, check=_attention_shapes
    )


QK_NORM_ROPE_KV_WRITE_ATTENTION = _attention_rule("QK_NORM_ROPE_KV_WRITE_ATTENTION", _QK_NORM_ATTENTION_OPS)
ROPE_KV_WRITE_ATTENTION = _attention_rule("ROPE_KV_WRITE_ATTENTION", _ROPE_ATTENTION_OPS)
# The same in a batched step, over its rows (fusion.BATCH_RULES; shaders/attention_rows.comp FUSED,
# used on GPUs: lowering/rows.fused_attention_rows)
QK_NORM_ROPE_KV_WRITE_ATTENTION_ROWS = _attention_rule(
    "QK_NORM_ROPE_KV_WRITE_ATTENTION_ROWS", _QK_NORM_ATTENTION_OPS
)
ROPE_KV_WRITE_ATTENTION_ROWS = _attention_rule("ROPE_KV_WRITE_ATTENTION_ROWS", _ROPE_ATTENTION_OPS)


# -- 7. residual add and the next norm in one pass (new residual and normed output) --


def _lower_add_norm(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(
        m,
        {"a": c["a"], "b": c["b"], "norm_w": c["norm_w"], "sum": c["s"], "out": c["n"]},
        {"eps": eps_of(m, p, "n")},
    )


def _same_sizes(m: Match, p: Program) -> bool:
    """add_rms_norm.comp adds element by element: not a bias broadcast over a chunk's rows (Qwen3
    with attention_bias: q + its bias, then the per-head q norm)."""
    c = m.captures
    return p.values[c["a"]].numel == p.values[c["b"]].numel == p.values[c["s"]].numel


def _add_norm_rule(name: str, where) -> Rule:
    return rule(
        name,
        op("add", ("a", "b"), ("s",)),
        op("rms_norm", ("s", "norm_w"), ("n",), where=where),
        exports=("s", "n"),
        lower=_lower_add_norm,
        check=_same_sizes,
    )


ADD_RMS_NORM = _add_norm_rule("ADD_RMS_NORM", whole_norm)


# A batched decode step's residual add and the next norm, over each of its rows (not in
# DEFAULT_RULES: the decode step's matvecs fold that norm in; fusion.BATCH_RULES). Each of those
# two kernels is a dispatch of its own between barriers, at every width: H200, Qwen3-0.6B F16, the
# adds took ~185 µs of a 3.2 ms 4-row step (bench/results/nvidia-h200/2026-11-27-batch-rows/).
ADD_RMS_NORM_ROWS = _add_norm_rule("ADD_RMS_NORM_ROWS", row_norm)
BATCH_RULES: tuple[Rule, ...] = (
    QK_NORM_ROPE_KV_WRITE_ATTENTION_ROWS,
    ROPE_KV_WRITE_ATTENTION_ROWS,
    ADD_RMS_NORM_ROWS,
)

# A prompt chunk's (the verify step's) residual add and the norm after it, over its rows
# (fusion.CHUNK_RULES, executors/prefill.py): a dispatch and a pass over the chunk fewer, twice a
# dense layer (the MoE layer's second add goes into moe_sum: MOE_SUM_ADD_CHUNK, first).
ADD_RMS_NORM_CHUNK = _add_norm_rule("ADD_RMS_NORM_CHUNK", chunk_norm)
CHUNK_RULES: tuple[Rule, ...] = (MOE_MATMUL_SILU_MUL_CHUNK, MOE_SUM_ADD_CHUNK, ADD_RMS_NORM_CHUNK)


# -- 8. Gemma's sandwich norm: the block output normed, then added to the residual (one pass).
# Anchored at the norm, which comes before the add in program order, so ADD_RMS_NORM (anchored at
# the add) cannot take the add and leave the next pre-norm unfoldable into its matvec.


def _lower_norm_add(m: Match, p: Program) -> Region:
    c = m.captures
    return match_region(
        m, {"x": c["x"], "norm_w": c["norm_w"], "residual": c["r"], "sum": c["s"]}, {"eps": eps_of(m, p, "n")}
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
    RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL,
    RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP,
    RMS_NORM_MATMUL_MOE_TOPK,
    RMS_NORM_MATMUL_BIAS_MOE_TOPK,
    MOE_MATMUL_SILU_MUL,
    MOE_MATMUL_SUM_ADD,
    MOE_MATMUL_BIAS_SUM_ADD,
    MOE_MATMUL_BIAS_SWIGLU_CLAMP,
    MOE_MATMUL_BIAS,
    RMS_NORM_MATMUL_SILU_MUL,
    RMS_NORM_MATMUL_BIAS_SILU_MUL,
    RMS_NORM_MATMUL_GELU_MUL,
    RMS_NORM_MATMUL,
    QK_NORM_ROPE_KV_WRITE_ATTENTION,
    ROPE_KV_WRITE_ATTENTION,
    RMS_NORM_SILU_MUL_MATMUL_ADD,
    MATMUL_SIGMOID_SCALE_ADD,
    SIGMOID_SCALE_MATMUL_ADD,
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

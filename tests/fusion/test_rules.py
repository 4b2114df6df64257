"""Each decode rule fires on Llama / Qwen2 / Qwen3 programs where it should, and refuses where it must."""

import pytest
from programs import (
    QWEN2_0_5B,
    QWEN3_0_6B,
    SMOLLM2_135M,
    SPECS,
    add_consumer,
    build,
    gated_attention_tail,
    gated_tail,
    mark_output,
    shared_tail,
)

from fusion.partition import check_partition, partition, summarize
from fusion.rules import DEFAULT_RULES, rules_by_name

IDS = [s.name for s in SPECS]


def _attn(spec):
    return "QK_NORM_ROPE_KV_WRITE_ATTENTION" if spec.qk_norm else "ROPE_KV_WRITE_ATTENTION"


def _layer(spec):
    return ["RMS_NORM_MATMUL", _attn(spec), "MATMUL_ADD", "RMS_NORM_MATMUL_SILU_MUL", "MATMUL_ADD"]


def _run(p, rules=None):
    regions = partition(p, rules)
    check_partition(p, regions)
    return regions


def _layer_names(p, regions, i):
    """Names of the regions holding the ops of layer i (ops named l{i}.*), in list order."""
    owned = {j for j, o in enumerate(p.ops) if any(v.startswith(f"l{i}.") for v in o.outputs)}
    return [r.name for r in regions if owned & set(r.ops)]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_default_rules_on_full_models(spec):
    p = build(spec)
    regions = _run(p)
    L = spec.n_layers
    assert len(regions) == 5 * L + 2
    assert summarize(regions) == {
        "EMBED": 1,
        "RMS_NORM_MATMUL": L,
        _attn(spec): L,
        "MATMUL_ADD": 2 * L,
        "RMS_NORM_MATMUL_SILU_MUL": L,
        "RMS_NORM_MATMUL_ARGMAX": 1,
    }
    assert [r.name for r in regions] == ["EMBED"] + _layer(spec) * L + ["RMS_NORM_MATMUL_ARGMAX"]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_o_projection_bias_fuses(spec):
    """attention_bias on Llama / Qwen3: wo -> +bo -> +residual is one MATMUL_BIAS_ADD region."""
    p = build(spec.with_(o_bias=True, bias=True), n_layers=2)
    regions = _run(p)
    assert _layer_names(p, regions, 1) == [
        "RMS_NORM_MATMUL",
        _attn(spec),
        "MATMUL_BIAS_ADD",
        "RMS_NORM_MATMUL_SILU_MUL",
        "MATMUL_ADD",
    ]
    r = next(r for r in regions if r.name == "MATMUL_BIAS_ADD")
    assert (r.roles["weight"], r.roles["bias"], r.roles["residual"], r.outputs) == (
        "l0.wo",
        "l0.bo",
        "x0",
        ["l0.x1"],
    )
    assert next(r for r in regions if r.name == "MATMUL_ADD").roles["bias"] is None
    # the bias add's output read elsewhere too: the rule must refuse (legality), the add stays an op
    p = add_consumer(build(spec.with_(o_bias=True), n_layers=1), "l0.aob")
    assert "MATMUL_BIAS_ADD" not in summarize(_run(p))


def test_mlp_biases_fuse():
    """Llama mlp_bias: norm + gate/up + their biases + SwiGLU in one region, down + bias + residual."""
    p = build(SMOLLM2_135M.with_(mlp_bias=True), n_layers=2)
    regions = _run(p)
    assert _layer_names(p, regions, 1) == [
        "RMS_NORM_MATMUL",
        "ROPE_KV_WRITE_ATTENTION",
        "MATMUL_ADD",
        "RMS_NORM_MATMUL_BIAS_SILU_MUL",
        "MATMUL_BIAS_ADD",
    ]
    r = next(r for r in regions if r.name == "RMS_NORM_MATMUL_BIAS_SILU_MUL")
    assert (r.roles["b_gate"], r.roles["b_up"], r.rule) == ("l0.b_gate", "l0.b_up", r.name)
    # without the bias rule the norm still takes gate/up + biases (RMS_NORM_MATMUL), SwiGLU alone
    rules = [x.name for x in DEFAULT_RULES if x.name != "RMS_NORM_MATMUL_BIAS_SILU_MUL"]
    assert _layer_names(p, _run(p, rules), 1)[3:] == ["RMS_NORM_MATMUL", "SILU_MUL", "MATMUL_BIAS_ADD"]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_roles_of_a_layer(spec):
    p = build(spec, n_layers=1)
    r = {reg.name: reg for reg in _run(p)}
    qkv = r["RMS_NORM_MATMUL"]
    assert qkv.roles["weights"] == ["l0.wq", "l0.wk", "l0.wv"]
    if spec.bias:
        assert qkv.roles["biases"] == ["l0.bq", "l0.bk", "l0.bv"]
        assert qkv.roles["outs"] == qkv.outputs == ["l0.qb", "l0.kb", "l0.vb"]
    else:
        assert qkv.roles["biases"] == [None] * 3
        assert qkv.roles["outs"] == qkv.outputs == ["l0.q", "l0.k", "l0.v"]
    assert qkv.roles["x"] == "x0" and qkv.roles["norm_w"] == "l0.attn_norm"
    attn = r[_attn(spec)]
    assert attn.outputs == ["l0.o", "l0.k_cache", "l0.v_cache"]
    assert (attn.attrs["n_heads"], attn.attrs["n_kv_heads"]) == (spec.n_heads, spec.n_kv_heads)
    if spec.qk_norm:
        assert (attn.roles["q_norm_w"], attn.roles["k_norm_w"]) == ("l0.q_norm", "l0.k_norm")
        assert len(attn.ops) == 6
    swiglu = r["RMS_NORM_MATMUL_SILU_MUL"]
    assert (swiglu.roles["w_gate"], swiglu.roles["w_up"], swiglu.outputs) == (
        "l0.w_gate",
        "l0.w_up",
        ["l0.a"],
    )
    head = r["RMS_NORM_MATMUL_ARGMAX"]
    assert head.outputs == ["logits", "next_token"]  # logits stays exported: a program output
    assert head.roles["weight"] == "tok_embd"


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_each_rule_alone(spec):
    p = build(spec, n_layers=3)
    L = 3
    expect = {
        "RMS_NORM_MATMUL_ARGMAX": 1,
        "RMS_NORM_MATMUL_SILU_MUL": L,
        # alone, the norm also takes gate/up, and the final norm takes lm_head
        "RMS_NORM_MATMUL": 2 * L + 1,
        _attn(spec): L,
        "MATMUL_ADD": 2 * L,
        "MATMUL_SILU_MUL": L,
        "ADD_RMS_NORM": 2 * L,
    }
    for name, n in expect.items():
        assert summarize(_run(p, [name])).get(name, 0) == n, name
    other = "ROPE_KV_WRITE_ATTENTION" if spec.qk_norm else "QK_NORM_ROPE_KV_WRITE_ATTENTION"
    # Qwen3's rope q reads the q norm's output; plain ROPE_KV_WRITE_ATTENTION still fires there
    assert summarize(_run(p, [other])).get(other, 0) == (L if spec.qk_norm else 0)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_lower_priority_rules_fire_in_subsets(spec):
    p = build(spec, n_layers=4)
    s = summarize(_run(p, ["ADD_RMS_NORM", "MATMUL_SILU_MUL"]))
    assert s["ADD_RMS_NORM"] == 2 * 4 and s["MATMUL_SILU_MUL"] == 4
    no_norm_swiglu = [r for r in DEFAULT_RULES if r.name != "RMS_NORM_MATMUL_SILU_MUL"]
    s = summarize(_run(p, no_norm_swiglu))
    assert s["RMS_NORM_MATMUL"] == 2 * 4 and s["SILU_MUL"] == 4 and "MATMUL_SILU_MUL" not in s


def test_matmul_silu_mul_when_the_norm_cannot_be_folded():
    p = add_consumer(build(SMOLLM2_135M, n_layers=2), "l1.h2", "l1.extra")  # the ffn norm's output read twice
    regions = _run(p)
    assert _layer_names(p, regions, 1) == [
        "RMS_NORM_MATMUL",
        "ROPE_KV_WRITE_ATTENTION",
        "MATMUL_ADD",
        "RMS_NORM",
        "ADD",
        "MATMUL_SILU_MUL",
        "MATMUL_ADD",
    ]
    assert _layer_names(p, regions, 0) == _layer(SMOLLM2_135M)


def test_intermediate_with_two_consumers_refuses():
    p = add_consumer(build(QWEN2_0_5B, n_layers=2), "l0.g", "l0.extra")
    regions = _run(p)
    # g leaves the swiglu region, so only the norm + gate/up projections fuse
    assert _layer_names(p, regions, 0) == [
        "RMS_NORM_MATMUL",
        "ROPE_KV_WRITE_ATTENTION",
        "MATMUL_ADD",
        "RMS_NORM_MATMUL",
        "ADD",
        "SILU_MUL",
        "MATMUL_ADD",
    ]
    ffn = next(r for r in regions if r.name == "RMS_NORM_MATMUL" and "l0.w_gate" in r.inputs)
    assert ffn.outputs == ["l0.g", "l0.u"]
    assert _layer_names(p, regions, 1) == _layer(QWEN2_0_5B)


def test_intermediate_that_is_a_program_output_refuses():
    p = mark_output(build(QWEN3_0_6B, n_layers=2), "l1.g")
    regions = _run(p)
    assert _layer_names(p, regions, 1) == [
        "RMS_NORM_MATMUL",
        "QK_NORM_ROPE_KV_WRITE_ATTENTION",
        "MATMUL_ADD",
        "RMS_NORM_MATMUL",
        "SILU_MUL",
        "MATMUL_ADD",
    ]
    p = mark_output(build(SMOLLM2_135M, n_layers=1), "hf")  # final normed value read by the host
    names = [r.name for r in _run(p)]
    assert "RMS_NORM_MATMUL_ARGMAX" not in names
    assert names[-3:] == ["RMS_NORM", "MATMUL", "ARGMAX"]


GATED = "RMS_NORM_SILU_MUL_MATMUL_ADD"


@pytest.mark.parametrize("heads", [4, 1], ids=["per-head", "whole-vector"])
def test_gated_norm_folds_into_the_out_projection(heads):
    """Qwen3.5's per-head norm, silu(z) gate, out_proj and residual add: one region, its roles named."""
    p = gated_tail(heads, 8, 32)
    (r,) = _run(p)
    assert r.rule == GATED and r.outputs == ["s"]
    assert r.roles == {"o": "o", "norm_w": "norm_w", "z": "z", "weight": "w", "residual": "x", "out": "s"}
    assert r.attrs == {"eps": 1e-6, "dtype": "f32"}


def test_gated_norm_refuses_the_other_gate_and_shared_intermediates():
    """silu of the normed o (silu_mul is not commutative), a normed or gated value read elsewhere or
    by the host: the rule refuses, the out projection still takes the residual (MATMUL_ADD)."""
    rest = ["RMS_NORM", "SILU_MUL", "MATMUL_ADD"]
    assert [r.name for r in _run(gated_tail(4, 8, 32, silu_of="n"))] == rest
    for value in ("n", "g"):
        for p in (
            add_consumer(gated_tail(4, 8, 32), value, verify=False),
            mark_output(gated_tail(4, 8, 32), value, verify=False),
        ):
            assert [r.name for r in _run(p) if r.rule] == ["MATMUL_ADD"], value


SHARED = "MATMUL_SIGMOID_SCALE_ADD"


@pytest.mark.parametrize("scaled_first", [False, True], ids=["residual-first", "scaled-first"])
def test_shared_expert_gate_folds_into_its_down(scaled_first):
    """A gated shared expert's down, its sigmoid scale and the residual add (either operand order):
    one region, its roles named; a gate another op reads too is still only read."""
    for p in (
        shared_tail(48, 32, scaled_first=scaled_first),
        add_consumer(shared_tail(48, 32), "g", verify=False),
    ):
        r = next(r for r in _run(p) if r.rule)
        assert r.rule == SHARED and r.outputs == ["s"]
        assert r.roles == {"weight": "w", "x": "a", "gate": "g", "residual": "r", "out": "s"}
        assert r.attrs == {"dtype": "f32"}


def test_shared_expert_gate_refuses_a_gate_per_row_and_shared_intermediates():
    """A gate per row (a chunk's shape: the kernel reads one float), the down's output or the scaled
    value read elsewhere or by the host: no region takes the three ops."""
    assert not any(r.rule for r in _run(shared_tail(48, 32, gates=2)))
    for value in ("y", "sc"):
        for p in (
            add_consumer(shared_tail(48, 32), value, verify=False),
            mark_output(shared_tail(48, 32), value, verify=False),
        ):
            assert not any(r.rule for r in _run(p)), value


def test_attention_gate_folds_into_the_o_projection():
    """Qwen3.5's attention output gated element by element, o_proj and the residual add: one region
    (x gated as it loads); a gate per group of elements, or the gated x read elsewhere, refuses."""
    (r,) = _run(gated_attention_tail(32, 16))
    assert r.rule == "SIGMOID_SCALE_MATMUL_ADD" and r.outputs == ["s"]
    assert r.roles == {"weight": "w", "x": "o", "gate": "g", "residual": "r", "out": "s"}
    apart = ["SIGMOID_SCALE", "MATMUL_ADD"]
    assert [r.name for r in _run(gated_attention_tail(32, 16, gates=4))] == apart
    for p in (
        add_consumer(gated_attention_tail(32, 16), "go", verify=False),
        mark_output(gated_attention_tail(32, 16), "go", verify=False),
    ):
        assert [r.name for r in _run(p) if r.name != "ADD"] == apart


def test_mismatched_weight_dtypes_refuse_swiglu():
    spec = SMOLLM2_135M.with_(dtype="q8_0", dtypes={"l0.w_up": "q4_0"})
    p = build(spec, n_layers=2)
    regions = _run(p)
    assert _layer_names(p, regions, 0) == [
        "RMS_NORM_MATMUL",
        "ROPE_KV_WRITE_ATTENTION",
        "MATMUL_ADD",
        "RMS_NORM_MATMUL",
        "SILU_MUL",
        "MATMUL_ADD",
    ]
    assert _layer_names(p, regions, 1) == _layer(spec)
    # MATMUL_SILU_MUL has the same check
    assert summarize(_run(p, ["MATMUL_SILU_MUL"]))["MATMUL_SILU_MUL"] == 1
    # q/k/v of mixed dtypes still fuse (GGUF mixes them); the kernel reads attrs["dtypes"]
    p = build(SMOLLM2_135M.with_(dtypes={"l0.wv": "q8_0"}), n_layers=1)
    qkv = next(r for r in _run(p) if r.name == "RMS_NORM_MATMUL")
    assert qkv.attrs["dtypes"] == ["f16", "f16", "q8_0"]


def test_overlapping_candidates_first_in_program_order_wins():
    p = build(QWEN2_0_5B, n_layers=3)
    # MATMUL_ADD (anchored at wo / w_down) and ADD_RMS_NORM (anchored at the add) both want the add;
    # the earlier anchor wins whatever the priority order
    for names in (["MATMUL_ADD", "ADD_RMS_NORM"], ["ADD_RMS_NORM", "MATMUL_ADD"]):
        rules = [r for n in names for r in DEFAULT_RULES if r.name == n]
        s = summarize(_run(p, rules))
        assert s["MATMUL_ADD"] == 6 and "ADD_RMS_NORM" not in s
    # at the same anchor the earlier rule in the list wins
    first = rules_by_name(["RMS_NORM_MATMUL"]) + rules_by_name(["RMS_NORM_MATMUL_SILU_MUL"])
    s = summarize(_run(p, first))
    assert s["RMS_NORM_MATMUL"] == 7 and "RMS_NORM_MATMUL_SILU_MUL" not in s


def test_rules_by_name():
    assert [r.name for r in rules_by_name(["ADD_RMS_NORM", "MATMUL_ADD"])] == ["MATMUL_ADD", "ADD_RMS_NORM"]
    with pytest.raises(KeyError):
        rules_by_name(["NOPE"])
    assert len({r.name for r in DEFAULT_RULES}) == len(DEFAULT_RULES)

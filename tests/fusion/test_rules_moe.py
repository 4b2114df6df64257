"""fusion/rules_moe.py: the MoE rules on a qwen3moe / qwen2moe / gpt-oss decode Program (no GPU),
and the MoE ops in a prompt chunk (fusion/chunk.py) and in verify() (fusion/verify.py)."""

from __future__ import annotations

import pytest

from fusion.chunk import chunk_program
from fusion.ir import IRError, Program
from fusion.partition import partition
from fusion.rules import CHUNK_RULES
from tests.helpers.make_models import MOE, MOE_OVERRIDES, SMALL
from vkdecode.models import build_program
from vkdecode.models.config import ModelArgs


def program(arch_class: str, **kw) -> Program:
    shared = {"shared_expert_intermediate_size": 48} if arch_class.startswith("Qwen2") else {}
    cfg = {**SMALL, **MOE, "architectures": [arch_class], **shared, **kw}
    return build_program(ModelArgs.from_hf_config({k: v for k, v in cfg.items() if v is not None}), 32)


@pytest.mark.parametrize("arch_class", ["Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"])
def test_each_moe_layer_takes_the_three_rules(arch_class):
    p = program(arch_class, num_hidden_layers=3, mlp_only_layers=[1])
    rules = [r.rule for r in partition(p)]
    for name in ("RMS_NORM_MATMUL_MOE_TOPK", "MOE_MATMUL_SILU_MUL", "MOE_MATMUL_SUM_ADD"):
        assert rules.count(name) == 2, (name, rules)  # layers 0 and 2; layer 1 is dense
    assert rules.count("RMS_NORM_MATMUL_SILU_MUL") == 1


def test_qwen2moe_shared_expert_ends_in_its_down():
    """qwen2moe's MoE layer adds the routed experts to the residual (MOE_MATMUL_SUM_ADD), then the
    gated shared expert (MATMUL_SIGMOID_SCALE_ADD, its one-float gate read, the experts' sum its
    residual): every residual add ends a matvec, so each layer input norm and the final one fold
    into the matvecs after them and no ADD_RMS_NORM is left."""
    p = program("Qwen2MoeForCausalLM", num_hidden_layers=3, mlp_only_layers=[1])
    regions = partition(p)
    rules = [r.rule for r in regions]
    sums = [r.outputs for r in regions if r.rule == "MOE_MATMUL_SUM_ADD"]
    gated = [r for r in regions if r.rule == "MATMUL_SIGMOID_SCALE_ADD"]
    assert [[r.roles["residual"]] for r in gated] == sums and len(sums) == 2  # layer 1 is dense
    assert all(p.values[r.roles["gate"]].numel == 1 for r in gated)
    assert "ADD_RMS_NORM" not in rules and rules[-1] == "RMS_NORM_MATMUL_ARGMAX", rules
    assert rules.count("RMS_NORM_MATMUL") == 3, rules


def gpt_oss_program(**kw) -> Program:
    cfg = {**SMALL, **MOE_OVERRIDES["gpt_oss"], "architectures": ["GptOssForCausalLM"], **kw}
    return build_program(ModelArgs.from_hf_config({k: v for k, v in cfg.items() if v is not None}), 32)


GPT_OSS_BLOCK = {  # gpt-oss's MoE block: each region's ops
    "RMS_NORM_MATMUL_BIAS_MOE_TOPK": ["rms_norm", "matmul", "add", "moe_topk"],
    "MOE_MATMUL_BIAS_SWIGLU_CLAMP": ["moe_matmul", "moe_bias", "moe_matmul", "moe_bias", "swiglu_clamp"],
    "MOE_MATMUL_BIAS_SUM_ADD": ["moe_matmul", "moe_bias", "moe_sum", "add"],
}


def test_each_gpt_oss_layer_takes_the_three_biased_rules():
    """A gpt-oss layer's MoE block is three regions: the router's bias add and the residual add are
    inside them, so the next layer's norm goes into its q/k/v matvec (RMS_NORM_MATMUL) and the final
    norm into the lm_head (RMS_NORM_MATMUL_ARGMAX): no region of the step is a lone op but embed."""
    p = gpt_oss_program(num_hidden_layers=3)
    regions = partition(p)
    rules = [r.rule for r in regions]
    for name, kinds in GPT_OSS_BLOCK.items():
        mine = [r for r in regions if r.rule == name]
        assert len(mine) == 3, (name, rules)
        assert all([p.ops[i].kind for i in r.ops] == kinds for r in mine)
    assert rules.count("RMS_NORM_MATMUL") == 3 and rules[-1] == "RMS_NORM_MATMUL_ARGMAX", rules
    assert [r.name for r in regions if r.rule is None] == ["EMBED"]
    for r in regions:
        if r.rule == "RMS_NORM_MATMUL_BIAS_MOE_TOPK":
            assert p.values[r.roles["b"]].kind == "weight" and p.values[r.roles["b"]].shape == (8,)
            assert set(r.outputs) == {r.roles["h"], r.roles["ids"], r.roles["weights"]}
        elif r.rule == "MOE_MATMUL_BIAS_SUM_ADD":
            assert p.values[r.roles["b"]].shape == (8, SMALL["hidden_size"])
            assert p.values[r.roles["r"]].kind == "activation" and r.outputs == [r.roles["s"]]


def test_a_big_gpt_oss_router_goes_into_the_experts_gate_up():
    """A router past one workgroup (128 experts x 384, as gpt-oss-20b's 32 x 2880 is): its bias, its
    top-k and the experts' gate/up with their bias rows and the GLU are one region, its roles those
    of the router (logits: the biased ones the top-k reads) and of the gate/up."""
    p = gpt_oss_program(hidden_size=384, num_local_experts=128, num_experts_per_tok=4)
    regions = partition(p)
    rules = [r.rule for r in regions]
    name = "RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP"
    assert rules.count(name) == 2 and rules.count("MOE_MATMUL_BIAS_SUM_ADD") == 2, rules
    assert not {"RMS_NORM_MATMUL_BIAS_MOE_TOPK", "MOE_MATMUL_BIAS_SWIGLU_CLAMP"} & set(rules), rules
    for r in (r for r in regions if r.rule == name):
        kinds = [p.ops[i].kind for i in r.ops]
        assert (
            kinds
            == GPT_OSS_BLOCK["RMS_NORM_MATMUL_BIAS_MOE_TOPK"] + GPT_OSS_BLOCK["MOE_MATMUL_BIAS_SWIGLU_CLAMP"]
        )
        topk = next(p.ops[i] for i in r.ops if p.ops[i].kind == "moe_topk")
        assert r.roles["logits"] == topk.inputs[0] and p.values[r.roles["b"]].shape == (128,)
        assert {"b_gate", "b_up"} <= r.roles.keys() and r.attrs["limit"] == 1.5 and r.attrs["norm"]
    small = partition(gpt_oss_program(hidden_size=384, num_local_experts=64, num_experts_per_tok=4))
    assert name not in {r.rule for r in small}  # 64 x 384: the one-workgroup router


def test_the_biased_rules_keep_off_a_chunk():
    """A prompt chunk's router bias is added to every row and its downs sum each row's slots: the
    decode step's checks refuse both rules (the chunk's rows run the ops' kernels)."""
    for experts in (8, 128):  # the one-workgroup router and one past it (with the gate/up)
        chunk = chunk_program(gpt_oss_program(hidden_size=384, num_local_experts=experts), 5, "all")
        rules = {r.rule for r in partition(chunk)}
        assert not {r for r in rules if r and "BIAS_MOE_TOPK" in r or r == "MOE_MATMUL_BIAS_SUM_ADD"}, rules


@pytest.mark.parametrize("tail", ["kv", "all"])
def test_moe_ops_widen_to_a_chunk(tail):
    p = chunk_program(program("Qwen2MoeForCausalLM"), 5, tail)
    kinds = {o.kind for o in p.ops}
    assert {"moe_topk", "moe_matmul", "moe_sum", "sigmoid_scale"} <= kinds
    ids = next(o for o in p.ops if o.kind == "moe_topk").outputs[0]
    assert p.values[ids].shape == (5 * MOE["num_experts_per_tok"],)


def test_verify_refuses_bad_moe_shapes():
    p = Program()
    p.value("w", (4, 8, 32), "f32", "weight")
    p.value("x", (32,), "f32", "state")
    p.value("ids", (3,), "u32", "state")
    p.value("y", (16,), "f32", "output")  # 3 slots of 8 rows are 24
    p.op("moe_matmul", ["w", "x", "ids"], ["y"])
    with pytest.raises(IRError, match="moe_matmul"):
        p.verify()
    q = Program()
    q.value("l", (8,), "f32", "state")
    q.value("i", (3,), "u32", "output")
    q.value("g", (3,), "f32", "output")
    q.op("moe_topk", ["l"], ["i", "g"], k=3, n_experts=2)
    with pytest.raises(IRError, match="k 3"):
        q.verify()


@pytest.mark.parametrize("arch_class", ["Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM"])
def test_each_moe_layer_of_a_chunk_takes_the_chunk_rules(arch_class):
    """CHUNK_RULES: every MoE layer of a chunk (tail all: every layer's FFN) takes the SwiGLU rule
    (g stays inside: the up matmul reads it) and the weighted sum + the residual add it feeds; the
    attention's residual add and the norm after it take ADD_RMS_NORM_CHUNK; the decode step none."""
    p = program(arch_class, num_hidden_layers=3, mlp_only_layers=[1])
    chunk = chunk_program(p, 16, "all")
    regions = partition(chunk, CHUNK_RULES)
    rules = [r.rule for r in regions]
    assert rules.count("MOE_MATMUL_SILU_MUL_CHUNK") == rules.count("MOE_SUM_ADD_CHUNK") == 2, rules
    assert set(rules) <= {None, "MOE_MATMUL_SILU_MUL_CHUNK", "MOE_SUM_ADD_CHUNK", "ADD_RMS_NORM_CHUNK"}
    # 3 after attention, the dense layer's second; qwen2moe: and the MoE layers' shared expert's adds
    # (their moe_sum took the add of the routed experts to the residual)
    assert rules.count("ADD_RMS_NORM_CHUNK") == (6 if arch_class == "Qwen2MoeForCausalLM" else 4), rules
    for r in regions:
        if r.rule == "MOE_MATMUL_SILU_MUL_CHUNK":
            assert r.outputs == [r.roles["a"]] and r.roles["g"] not in r.outputs
        elif r.rule == "MOE_SUM_ADD_CHUNK":
            kinds = [chunk.ops[i].kind for i in r.ops]
            assert kinds == ["moe_sum", "add"] and r.outputs == [r.roles["s"]]
    assert not any(r.rule for r in partition(p, CHUNK_RULES))  # not a chunk: the checks refuse


@pytest.mark.parametrize("bias", [False, True])
def test_the_sum_add_chunk_rule_takes_only_an_activation_add(bias):
    """moe_sum's output plus an activation (either operand order) is the rule's; plus a weight (a
    bias, added to every row of a chunk) is not."""
    p = Program("t")
    p.meta["chunk_rows"] = 2
    p.value("x", (16,), "f32", "state")
    p.value("y", (4 * 8,), "f32", "state")
    p.value("sw", (4,), "f32", "state")
    p.value("b", (8,), "f32", "weight")
    p.value("r", (16,))
    p.value("o", (16,))
    p.value("s", (16,), "f32", "output")
    p.value("t", (16,), "f32", "output")
    p.op("add", ["x", "x"], ["r"])  # the residual stream: an activation
    p.op("moe_sum", ["y", "sw"], ["o"])
    p.op("add", ["o", "b"] if bias else ["r", "o"], ["s"])
    p.op("add", ["r", "s"], ["t"])
    rules = [r.rule for r in partition(p.verify(), CHUNK_RULES)]
    assert ("MOE_SUM_ADD_CHUNK" in rules) != bias, rules

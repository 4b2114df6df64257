"""Qwen3.5-MoE (models/qwen35moe.py): its config read and refused, its routing not trivial, its step
against transformers (the reference, then every mode of the GPU path against the reference), its
fused-expert checkpoints read as the per-expert ones, prompt chunks against the token path, the
user's path against transformers' own greedy generation, the paths refused for a recurrent state,
and the ConditionalGeneration checkpoint's text model. The checks shared with dense Qwen3.5 are
tests/helpers/qwen35_checks.py's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import (
    MOE_OVERRIDES,
    QWEN35,
    SMALL,
    fused_experts_hf_model,
    hf_logits,
    hf_state,
    tiny_hf_model,
)
from tests.helpers.qwen35_checks import (
    check_multimodal_generate,
    multimodal_model,
)
from vkdecode.errors import ModelError
from vkdecode.models.config import ModelArgs
from vkdecode.models.loader import load_model
from vkdecode.models.qwen35 import FULL, LINEAR
from vkdecode.reference import Reference

CTX = 64
TOKENS = [5, 9, 17, 33, 2, 70, 11, 4, 200, 8]
EXPERTS = MOE_OVERRIDES["qwen35moe"]  # 4 experts of 32 rows, 2 per token, a shared expert of 48


def config(**kw) -> dict:
    """A Qwen3.5-MoE text config as Qwen writes it: no intermediate_size (no dense MLP)."""
    cfg = {
        **SMALL,
        **QWEN35,
        **EXPERTS,
        "intermediate_size": None,
        "architectures": ["Qwen3_5MoeForCausalLM"],
        "model_type": "qwen3_5_moe_text",
        **kw,
    }
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.fixture(scope="module")
def tiny(models_dir):
    path = tiny_hf_model("qwen35moe", models_dir)
    return path, load_model(str(path), ctx=CTX)


def test_config_read():
    a = ModelArgs.from_hf_config(config())
    assert (a.arch, a.rotary_dim, a.linear_attn, a.layer_types) == (
        "qwen3_5_moe",
        8,
        (2, 4, 16, 8, 4),
        (LINEAR, LINEAR, FULL, LINEAR),
    )
    # every layer sparse, the top-k weights renormalised (transformers' Qwen3.5-MoE, whatever it says)
    assert (a.n_experts, a.n_experts_used, a.expert_ffn, a.shared_expert_ffn) == (4, 2, 32, 48)
    assert (a.norm_topk_prob, a.dense_layers) == (True, ())
    # the keys' neutral values, and the training-only keys, are accepted
    neutral = {"norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []}
    training = {"router_aux_loss_coef": 0.001, "output_router_logits": True, "mtp_num_hidden_layers": 1}
    assert ModelArgs.from_hf_config(config(**neutral, **training)).n_experts == 4
    # the ConditionalGeneration form: its text_config, the top level's tied head
    wrapped = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "tie_word_embeddings": True,
        "text_config": {k: v for k, v in config().items() if k != "architectures"},
    }
    b = ModelArgs.from_hf_config(wrapped)
    assert (b.arch, b.n_experts, b.tie_embeddings) == ("qwen3_5_moe", 4, True)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"norm_topk_prob": False}, "norm_topk_prob"),
        ({"decoder_sparse_step": 2}, "decoder_sparse_step"),
        ({"mlp_only_layers": [1]}, "mlp_only_layers"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
        ({"moe_intermediate_size": None}, "moe_intermediate_size"),
        ({"shared_expert_intermediate_size": None}, "shared_expert_intermediate_size"),
        ({"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size"),
        ({"attention_bias": True}, "attention_bias"),
        ({"attn_output_gate": False}, "attn_output_gate"),
        ({"layer_types": ["sliding_attention"] * 4}, "layer_types"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_config_refused(kw, msg):
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config(config(**kw))


def test_routing_is_not_trivial(tiny):
    """The experts differ, the shared expert's gate is open to a varying degree, and the router picks
    different experts from token to token in every layer: a wrong expert, weight or gate shows."""
    _, m = tiny
    args, ref = m.args, Reference(m.program, m.weights, dtype=np.float64)
    for i in range(args.n_layers):
        gate = ref.weights[f"layers.{i}.exp_gate"].reshape(args.n_experts, args.expert_ffn, -1)
        assert min(np.abs(gate[e] - gate[0]).max() for e in range(1, args.n_experts)) > 0.1
    picked = {i: set() for i in range(args.n_layers)}
    for p, t in enumerate(TOKENS):
        ref.step(t, p)
        for i in range(args.n_layers):
            picked[i].add(tuple(sorted(ref.values[f"layers.{i}.expert_ids"].tolist())))
            w = ref.values[f"layers.{i}.expert_weights"]
            assert abs(w.sum() - 1.0) < 1e-9 and w.min() > 0  # renormalised top-k weights
    assert all(len(s) >= 3 for s in picked.values()), picked  # of the 6 pairs of 4 experts


def test_reference_matches_transformers(tiny):
    path, m = tiny
    want = hf_logits(path, TOKENS)
    ref = Reference(m.program, m.weights, dtype=np.float64)
    for p, t in enumerate(TOKENS):
        got = ref.step(t, p)["logits"]
        # transformers' delta rule runs in float32 whatever the model's dtype
        assert np.abs(got - want[p]).max() <= 2e-4 * np.abs(want[p]).max(), f"position {p}"


def test_fused_experts_read_as_per_expert(tiny, models_dir):
    """Qwen ships the experts fused (gate_up_proj, down_proj): transformers reads that directory to
    the same logits, and vkdecode to the same weights as the per-expert one."""
    path, m = tiny
    fused = fused_experts_hf_model(path, models_dir / "hf-qwen35moe-fused")
    assert any(k.endswith("mlp.experts.gate_up_proj") for k in hf_state(fused))
    assert not any(".experts.0." in k for k in hf_state(fused))
    np.testing.assert_array_equal(hf_logits(fused, TOKENS[:4]), hf_logits(path, TOKENS[:4]))
    f = load_model(str(fused), ctx=CTX)
    experts = [n for n in m.weights if ".exp_" in n]
    assert len(experts) == 3 * m.args.n_layers
    for n in experts:
        np.testing.assert_array_equal(f.weights[n].dequantize(), m.weights[n].dequantize(), err_msg=n)


def test_multimodal_checkpoint_runs_its_text_model(device, models_dir):
    """A Qwen3_5MoeForConditionalGeneration directory, its experts fused as Qwen ships them: its
    text_config is read, its text model's tensors found under model.language_model., its vision
    tower left alone; greedy tokens equal transformers' generate on the same text ids."""
    text = {**SMALL, **QWEN35, **EXPERTS, "tie_word_embeddings": False}
    src = multimodal_model(
        models_dir / "hf-qwen35moe-multimodal", "Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration", text
    )
    path = fused_experts_hf_model(src, models_dir / "hf-qwen35moe-multimodal-fused")
    assert "model.language_model.layers.0.mlp.experts.gate_up_proj" in hf_state(path)
    a = ModelArgs.from_hf_config(str(path))
    assert (a.arch, a.n_experts, a.shared_expert_ffn, a.tie_embeddings) == ("qwen3_5_moe", 4, 48, False)
    check_multimodal_generate(device, path, "Qwen3_5MoeForConditionalGeneration", CTX)


def test_kv_heads_default_is_transformers():
    """A config.json without num_key_value_heads gets Qwen3_5MoeTextConfig's default, not all heads."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.Qwen3_5MoeTextConfig()
    a = ModelArgs.from_hf_config(config(num_key_value_heads=None, num_attention_heads=8))  # not 8
    assert a.n_kv_heads == hf.num_key_value_heads == 2

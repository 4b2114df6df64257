"""Every HF config key that changes the math: a tiny random model with that key, built and saved by
transformers, either decodes to transformers' greedy ids or is refused at load with a ModelError
naming the key. Never a silent run. Adding a key is one line of CASES."""

from __future__ import annotations

import numpy as np
import pytest

import vkdecode
from tests.helpers.make_models import hf_logits, tiny_hf_model, write_gguf
from vkdecode.errors import ModelError

SAME = "same"  # expected: vkdecode's greedy ids == transformers' greedy ids
ROPE = {"rope_theta": 10000.0}
LLAMA3_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}

# (arch, config overrides, SAME or the key the refusal must name)
CASES = [
    ("llama", {"attention_bias": True}, SAME),  # q/k/v/o biases
    ("qwen3", {"attention_bias": True}, SAME),
    ("qwen2", {"attention_bias": False}, SAME),  # Qwen2: q/k/v biases whatever it says
    ("llama", {"mlp_bias": True}, SAME),  # gate/up/down biases
    ("qwen3", {"mlp_bias": True}, SAME),  # transformers' Qwen3 has no MLP bias
    ("llama", {"attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True}, SAME),
    ("llama", {"head_dim": 32}, SAME),  # head_dim != hidden / heads
    ("qwen3", {"head_dim": 8}, SAME),
    ("llama", {"tie_word_embeddings": True}, SAME),
    ("qwen2", {"tie_word_embeddings": False}, SAME),
    ("llama", {"rms_norm_eps": 0.5}, SAME),  # eps large enough to matter
    ("llama", {"rope_theta": 100.0}, SAME),
    ("llama", {"pretraining_tp": 2}, SAME),  # transformers' Llama ignores it
    ("llama", {"attention_dropout": 0.5}, SAME),  # inference: no dropout
    ("qwen2", {"max_window_layers": 1}, SAME),  # only with use_sliding_window
    ("llama", {"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
    ("llama", {"rope_parameters": {**ROPE, "rope_type": "linear", "factor": 2.0}}, SAME),
    ("llama", {"rope_parameters": {**ROPE, "rope_type": "dynamic", "factor": 2.0}}, "rope_parameters"),
    ("llama", {"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 2.0}}, SAME),
    ("llama", {"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 2.0, "truncate": False}}, SAME),
    (
        "llama",
        {"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 2.0, "attention_factor": 0.5}},
        SAME,
    ),
    (
        "llama",
        {
            "rope_parameters": {
                **ROPE,
                "rope_type": "longrope",
                "short_factor": [1.0] * 8,
                "long_factor": [2.0] * 8,
                "original_max_position_embeddings": 128,
            }
        },
        "rope_parameters",
    ),
    (
        "llama",
        {
            "rope_parameters": {
                **ROPE,
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            }
        },
        SAME,
    ),
    ("qwen3", {"rope_parameters": {**ROPE, "rope_type": "yarn", "factor": 4.0}}, SAME),
    ("gemma3", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
    ("llama", {"hidden_act": "swish"}, SAME),  # the same SiLU in transformers
    ("llama", {"hidden_act": "gelu"}, "hidden_act"),
    ("qwen2", {"hidden_act": "relu"}, "hidden_act"),
    ("llama", {"logits_scaling": 2.0}, "logits_scaling"),
    ("llama", {"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
    ("llama", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ("llama", {"residual_multiplier": 0.5}, "residual_multiplier"),
    (
        "qwen2",
        {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
        "use_sliding_window",
    ),
    (
        "qwen3",
        {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
        "use_sliding_window",
    ),
    ("qwen3", {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 4}, "layer_types"),
]
PROMPT = [5, 17, 42, 99, 7, 250, 3, 64]
NEW = 6


def _id(case) -> str:
    arch, over, _ = case
    return (
        arch
        + "-"
        + "-".join(f"{k}={v if not isinstance(v, dict) else v.get('rope_type')}" for k, v in over.items())
    )


def vk_greedy(path, device, mode="fused", prompt=PROMPT, n=NEW) -> list[int]:
    with vkdecode.load(str(path), device=device, mode=mode, ctx=32) as model:
        return [r.token for r in model.stream_generate(prompt_ids=list(prompt), max_tokens=n)]


def reference_logits(path, seq: list[int]) -> np.ndarray:
    """vkdecode's numpy oracle (the program every GPU path is checked against) over seq."""
    from vkdecode.models import build_program
    from vkdecode.models.weights import load_weights
    from vkdecode.reference import Reference

    args, weights, _ = load_weights(str(path))
    ref = Reference(build_program(args, len(seq), {k: w.dtype for k, w in weights.items()}), weights)
    return np.array([ref.step(t, pos)["logits"] for pos, t in enumerate(seq)])


def assert_same_as_transformers(hf_dir, tokens: list[int], path=None) -> None:
    """transformers' logits over prompt + tokens, teacher-forced: its greedy choice at every step
    must be the token vkdecode chose (equal greedy runs, as long as they agree), and vkdecode's
    program (`path`: the HF dir or a GGUF of it) must give its logits at every position, so a
    key whose effect is too small to flip a greedy token still cannot pass unimplemented."""
    seq = PROMPT + tokens[:-1]
    logits = hf_logits(hf_dir, seq)
    hf = [int(i) for i in logits.argmax(axis=1)[len(PROMPT) - 1 :]]
    assert hf == tokens
    top2 = np.sort(logits[len(PROMPT) - 1 :], axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > 1e-3, "a near-tie: the comparison would be luck"
    ours = reference_logits(path or hf_dir, seq)
    assert np.abs(ours - logits).max() <= 1e-4 * np.abs(logits).max()


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_key_is_implemented_or_refused(device, models_dir, case):
    arch, overrides, expect = case
    path = tiny_hf_model(arch, models_dir, **overrides)
    if expect == SAME:
        assert_same_as_transformers(path, vk_greedy(path, device))
    else:
        with pytest.raises(ModelError) as e:
            vkdecode.load(str(path), device=device, ctx=32)
        assert expect in str(e.value) and "config.json" in str(e.value)


@pytest.mark.parametrize("mode", ["replay-nofuse", "unfused"])
def test_biases_agree_in_every_mode(device, models_dir, mode):
    """q/k/v/o and MLP biases: the per-op paths give the fused path's (= transformers') tokens."""
    path = tiny_hf_model("llama", models_dir, attention_bias=True, mlp_bias=True)
    assert vk_greedy(path, device, mode) == vk_greedy(path, device, "fused")


# GGUF: (arch, HF overrides, write_gguf metadata, extra f32 tensors, SAME or what the refusal names)
GGUF_CASES = [
    ("llama", {"attention_bias": True, "mlp_bias": True}, {}, {}, SAME),  # every bias tensor mapped
    ("qwen3", {"attention_bias": True}, {}, {}, SAME),
    ("llama", {"head_dim": 32}, {"llama.rope.dimension_count": 32}, {}, SAME),  # attention.key_length
    ("qwen3", {"tie_word_embeddings": True, "rms_norm_eps": 0.5}, {}, {}, SAME),  # no output.weight
    ("llama", {}, {"llama.rope.dimension_count": 16}, {}, SAME),  # = head_dim: full rotary
    ("llama", {}, {"llama.attention.layer_norm_epsilon": 1e-5}, {}, SAME),  # rms eps present too
    ("llama", {"rope_parameters": {**ROPE, "rope_type": "linear", "factor": 2.0}}, {}, {}, SAME),
    (
        "llama",
        {
            "rope_parameters": {
                **ROPE,
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 16,
            }
        },
        {},
        {},
        SAME,
    ),  # written by write_gguf as llama.cpp's type, factor and original_context_length
    (
        "llama",
        {
            "rope_parameters": {
                **ROPE,
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 16,
            }
        },
        {"llama.rope.scaling.yarn_ext_factor": 0.5},
        {},
        "llama.rope.scaling.yarn_ext_factor",
    ),
    (
        "llama",
        {},
        {"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 2.0},
        {},
        "llama.rope.scaling.type",
    ),
    # llama.cpp's readings of its rope scaling keys (settings.gguf_rope): a factor without a type is
    # linear; type none never scales; rope.scale_linear is the factor's old name
    (
        "llama",
        {"rope_parameters": {**ROPE, "rope_type": "linear", "factor": 4.0}},
        {"llama.rope.scaling.type": None},
        {},
        SAME,
    ),
    ("llama", {}, {"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": 4.0}, {}, SAME),
    (
        "llama",
        {"rope_parameters": {**ROPE, "rope_type": "linear", "factor": 2.0}},
        {"llama.rope.scaling.type": None, "llama.rope.scaling.factor": None, "llama.rope.scale_linear": 2.0},
        {},
        SAME,
    ),
    (
        "llama",
        {"rope_parameters": {**ROPE, **LLAMA3_SCALING}},
        {"llama.rope.scaling.factor": 2.0},
        {},
        "llama.rope.scaling.factor",
    ),  # and the rope_freqs tensor: llama.cpp would apply both
    ("gemma3", {}, {"gemma3.rope.freq_base_swa": 50000.0}, {}, "gemma3.rope.freq_base_swa"),
    (
        "llama",
        {
            "rope_parameters": {
                **ROPE,
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            }
        },
        {},
        {},
        SAME,
    ),  # as llama.cpp's rope_freqs.weight
    ("llama", {}, {}, {"rope_freqs.weight": np.ones(5, np.float32)}, "rope_freqs"),  # wrong length
    ("llama", {}, {"llama.rope.dimension_count": 8}, {}, "llama.rope.dimension_count"),
    (
        "llama",
        {},
        {"llama.attention.layer_norm_rms_epsilon": None, "llama.attention.layer_norm_epsilon": 1e-5},
        {},
        "llama.attention.layer_norm_epsilon",
    ),
    ("llama", {}, {"llama.attention.value_length": 32}, {}, "llama.attention.value_length"),
    ("llama", {}, {"llama.logit_scale": 2.0}, {}, "llama.logit_scale"),
    ("qwen2", {}, {"qwen2.final_logit_softcapping": 30.0}, {}, "qwen2.final_logit_softcapping"),
    ("qwen3", {}, {"qwen3.attn_logit_softcapping": 50.0}, {}, "qwen3.attn_logit_softcapping"),
    ("qwen2", {}, {"qwen2.attention.sliding_window": 4}, {}, "qwen2.attention.sliding_window"),
    # experts make a llama GGUF Mixtral (tests/models/test_moe.py): here without its other keys
    ("llama", {}, {"llama.expert_count": 4}, {}, "llama.expert_used_count"),
    ("llama", {}, {"llama.expert_count": 4, "llama.expert_used_count": 2}, {}, "not used"),
    (
        "qwen2",
        {},
        {},
        {f"blk.{i}.ffn_up.bias": np.ones(96, np.float32) for i in range(2)},
        "blk.0.ffn_up.bias",
    ),
    (
        "qwen3",
        {},
        {},
        {
            "blk.0.attn_output.bias": np.ones(64, np.float32),
            "blk.1.attn_output.bias": np.ones(64, np.float32),
        },
        SAME,
    ),  # llama.cpp reads bo
    ("llama", {}, {}, {"blk.1.attn_q.bias": np.ones(64, np.float32)}, "blk.1.attn_q.bias"),
]


def _gid(i, c) -> str:
    return f"{i}-{c[0]}-" + "-".join(list(c[1]) + [k.split(".", 1)[-1] for k in c[2]] + list(c[3]))[:60]


@pytest.mark.parametrize("i", range(len(GGUF_CASES)), ids=[_gid(i, c) for i, c in enumerate(GGUF_CASES)])
def test_gguf_key_is_implemented_or_refused(device, models_dir, i):
    arch, overrides, metadata, extra, expect = GGUF_CASES[i]
    hf = tiny_hf_model(arch, models_dir, **overrides)
    path = write_gguf(hf, models_dir / f"audit-{i}.f32.gguf", "f32", metadata=metadata, extra_tensors=extra)
    if expect == SAME and not extra:
        assert_same_as_transformers(hf, vk_greedy(path, device), path)
    elif expect == SAME:  # a tensor transformers' model does not have: vkdecode reads it as llama.cpp does
        from vkdecode.models.loader import load_model

        assert load_model(path, ctx=8).args.o_bias
    else:
        with pytest.raises(ModelError) as e:
            vkdecode.load(str(path), device=device, ctx=32)
        assert expect in str(e.value) and path.name in str(e.value)


def test_hf_tensor_the_config_does_not_use_is_refused(models_dir, tmp_path):
    """o_proj / q_proj biases in the safetensors while config.json says attention_bias: false:
    transformers would drop them with a warning; vkdecode refuses the directory, naming them."""
    import json
    import shutil

    src = tiny_hf_model("llama", models_dir, attention_bias=True)
    d = tmp_path / "bias-not-declared"
    shutil.copytree(src, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["attention_bias"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    from vkdecode.models.loader import load_model

    with pytest.raises(ModelError, match="not used") as e:
        load_model(d, ctx=8)
    assert "model.layers.0.self_attn.k_proj.bias" in str(e.value) and "more" in str(e.value)

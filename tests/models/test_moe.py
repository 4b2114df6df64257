"""Mixture-of-experts families: the numpy reference against transformers on tiny random models
(greedy tokens and logits at every step), and the config keys that are read or refused."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import (
    GPT_OSS_TRUNCATED,
    MOE,
    SMALL,
    hf_logits,
    mxfp4_hf_model,
    tiny_hf_model,
    write_gguf,
)
from tests.test_reference import PROMPT, PROMPT_IDS, reference_for, rel_err, run_greedy
from vkdecode.errors import ModelError
from vkdecode.models.config import ModelArgs
from vkdecode.models.weights import load_weights

DECODE = 16
# name -> (family, tiny_hf_model overrides)
MOE_MODELS = {
    "qwen3moe": ("qwen3moe", {}),
    "qwen3moe-norm": ("qwen3moe", {"norm_topk_prob": True}),
    # layer 0 dense (mlp_only_layers), the rest sparse; decoder_sparse_step 2 makes layer 2 dense too
    "qwen3moe-mixed": (
        "qwen3moe",
        {"mlp_only_layers": [0], "decoder_sparse_step": 2, "num_hidden_layers": 4},
    ),
    "mixtral": ("mixtral", {}),
    "qwen2moe": ("qwen2moe", {}),
    "qwen2moe-norm-mixed": ("qwen2moe", {"norm_topk_prob": True, "decoder_sparse_step": 2}),
    "olmoe": ("olmoe", {}),
    "olmoe-norm-bias": ("olmoe", {"norm_topk_prob": True, "attention_bias": True}),
    "gpt_oss": ("gpt_oss", {}),
    "gpt_oss-mha-full": ("gpt_oss", {"num_key_value_heads": 4, "layer_types": ["full_attention"] * 2}),
}


def need_transformers(at_least: tuple[int, int], what: str) -> None:
    """Skip where the installed transformers predates the one whose `what` vkdecode follows: older
    releases computed gpt-oss otherwise (checked on CPU: its logits 0.8-1.2 off with 5.17 and 5.18,
    equal from 5.19; the MXFP4 checkpoint's from 5.23). CI installs the latest; the GPU machine has 5.17."""
    import transformers

    have = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    if have < at_least:
        pytest.skip(
            f"transformers {transformers.__version__} < {at_least[0]}.{at_least[1]} computes {what} otherwise"
        )


@pytest.mark.parametrize("name", MOE_MODELS)
def test_reference_matches_transformers(models_dir, name):
    family, over = MOE_MODELS[name]
    if family == "gpt_oss":
        need_transformers((5, 19), "gpt-oss")
    d = tiny_hf_model(family, models_dir, **over)
    tokens, logits = run_greedy(reference_for(d), PROMPT_IDS, DECODE)
    ref = hf_logits(d, tokens)
    assert np.abs(ref).max() > 1.0  # logits are not degenerate
    assert rel_err(logits, ref) <= 1e-4, rel_err(logits, ref)
    assert list(ref.argmax(axis=1)[PROMPT - 1 : -1]) == tokens[PROMPT:]


def qwen3moe(**kw):
    cfg = {**SMALL, **MOE, "architectures": ["Qwen3MoeForCausalLM"], **kw}
    return {k: v for k, v in cfg.items() if v is not None}


def test_config_read():
    a = ModelArgs.from_hf_config(qwen3moe(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3]))
    assert (a.arch, a.n_experts, a.n_experts_used, a.expert_ffn, a.norm_topk_prob) == (
        "qwen3moe",
        8,
        2,
        32,
        False,
    )
    assert a.dense_layers == (0, 2, 3)
    # transformers 5 writes num_local_experts; router jitter and router logits do not change a decode
    b = ModelArgs.from_hf_config(
        qwen3moe(num_experts=None, num_local_experts=4, router_jitter_noise=0.1, output_router_logits=True)
    )
    assert b.n_experts == 4


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"num_local_experts": 4}, "disagree"),
        ({"moe_intermediate_size": None}, "moe_intermediate_size"),
        ({"shared_expert_intermediate_size": 64}, "shared experts"),
        ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
        ({"norm_topk_prob": "yes"}, "norm_topk_prob"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_config_refused(kw, msg):
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config(qwen3moe(**kw))


@pytest.mark.parametrize(
    "meta,msg",
    [
        ({"qwen3moe.expert_gating_func": 2}, "expert_gating_func"),
        ({"qwen3moe.expert_shared_count": 1}, "expert_shared_count"),
        ({"qwen3moe.expert_weights_scale": 2.5}, "expert_weights_scale"),
    ],
)
def test_gguf_routing_keys_refused(models_dir, meta, msg):
    d = tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True)
    name = "-".join(f"{k}={v}" for k, v in meta.items())
    g = write_gguf(d, models_dir / f"qwen3moe-{name}.f32.gguf", "f32", metadata=meta)
    with pytest.raises(ModelError, match=msg):
        load_weights(g)


def test_gguf_reference_matches_transformers(models_dir):
    """llama.cpp's qwen3moe (3-D expert tensors, ffn_gate_inp) renormalises the top-k weights."""
    d = tiny_hf_model("qwen3moe", models_dir, norm_topk_prob=True)
    g = write_gguf(d, models_dir / "qwen3moe.f32.gguf", "f32")
    tokens, logits = run_greedy(reference_for(g), PROMPT_IDS, DECODE)
    ref = hf_logits(d, tokens)
    assert rel_err(logits, ref) <= 1e-4, rel_err(logits, ref)


def test_mixtral_config():
    cfg = {**SMALL, "architectures": ["MixtralForCausalLM"], "num_local_experts": 4, "num_experts_per_tok": 2}
    a = ModelArgs.from_hf_config({k: v for k, v in cfg.items() if v is not None})
    assert (a.arch, a.n_experts, a.expert_ffn, a.norm_topk_prob, a.qk_norm) == ("mixtral", 4, 96, True, False)
    with pytest.raises(ModelError, match="sliding_window"):
        ModelArgs.from_hf_config({**cfg, "bos_token_id": 1, "sliding_window": 4096})


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"qkv_bias": False}, "qkv_bias"),
        ({"shared_expert_intermediate_size": 0}, "shared_expert_intermediate_size"),
    ],
)
def test_qwen2moe_refused(kw, msg):
    cfg = {**SMALL, **MOE, "architectures": ["Qwen2MoeForCausalLM"], "shared_expert_intermediate_size": 48}
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config({k: v for k, v in {**cfg, **kw}.items() if v is not None})


def test_olmoe_clip_qkv_refused():
    cfg = {**SMALL, "architectures": ["OlmoeForCausalLM"], "num_experts": 8, "num_experts_per_tok": 2}
    with pytest.raises(ModelError, match="clip_qkv"):
        ModelArgs.from_hf_config({k: v for k, v in {**cfg, "clip_qkv": 8.0}.items() if v is not None})


def test_mixtral_gguf_as_llama_matches_transformers(models_dir):
    """llama.cpp writes Mixtral as general.architecture `llama` with expert counts (q/k permuted)."""
    d = tiny_hf_model("mixtral", models_dir)
    g = write_gguf(d, models_dir / "mixtral-as-llama.f32.gguf", "f32", arch="llama")
    args = load_weights(g)[0]
    assert (args.arch, args.n_experts, args.expert_ffn, args.rope_layout) == ("llama", 8, 32, "pairs")
    tokens, logits = run_greedy(reference_for(g), PROMPT_IDS, DECODE)
    assert rel_err(logits, hf_logits(d, tokens)) <= 1e-4


def test_olmoe_gguf_matches_transformers(models_dir):
    d = tiny_hf_model("olmoe", models_dir)
    g = write_gguf(d, models_dir / "olmoe.f32.gguf", "f32")
    assert load_weights(g)[0].n_experts == 8
    tokens, logits = run_greedy(reference_for(g), PROMPT_IDS, DECODE)
    assert rel_err(logits, hf_logits(d, tokens)) <= 1e-4


def test_qwen2moe_gguf_matches_transformers(models_dir):
    """llama.cpp's qwen2moe: the shared-expert gate stored as a vector, top-k not renormalised."""
    d = tiny_hf_model("qwen2moe", models_dir)
    g = write_gguf(d, models_dir / "qwen2moe.f32.gguf", "f32")
    assert load_weights(g)[0].shared_expert_ffn == 48
    tokens, logits = run_greedy(reference_for(g), PROMPT_IDS, DECODE)
    assert rel_err(logits, hf_logits(d, tokens)) <= 1e-4


def gpt_oss(**kw):
    cfg = {
        **SMALL,
        "architectures": ["GptOssForCausalLM"],
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        **kw,
    }
    return {k: v for k, v in cfg.items() if v is not None}


def test_gpt_oss_config_defaults():
    """GptOssConfig's defaults where config.json says nothing: YaRN (factor 32 over 4096,
    untruncated) on base 150000, even layers sliding over 128 keys, biases, the GLU's constants."""
    a = ModelArgs.from_hf_config(gpt_oss(rope_theta=None, num_hidden_layers=4))
    assert a.rope_theta == 150000.0 and a.rope_scaling["rope_type"] == "yarn"
    assert (a.rope_scaling["factor"], a.rope_scaling["truncate"]) == (32.0, False)
    assert a.rope_scaling["original_max_position_embeddings"] == 4096
    assert a.layer_types == ("sliding_attention", "full_attention") * 2 and a.sliding_window == 128
    assert (
        a.attention_bias
        and a.o_bias
        and a.norm_topk_prob
        and (a.swiglu_alpha, a.swiglu_limit) == (1.702, 7.0)
    )
    assert (a.n_experts, a.n_experts_used, a.expert_ffn) == (8, 2, SMALL["intermediate_size"])


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config"),
        ({"swiglu_limit": 0}, "swiglu_limit"),
        ({"layer_types": ["sliding_attention"]}, "layer_types"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok"),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "dynamic"),
        ({"final_logit_softcapping": 30.0}, "final_logit_softcapping"),
    ],
)
def test_gpt_oss_config_refused(kw, msg):
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config(gpt_oss(**kw))


def test_gpt_oss_gguf_matches_transformers(models_dir):
    """llama.cpp's gpt-oss GGUF: gate and up split and output-major, post_attention_norm, sinks,
    router and expert biases, YaRN from rope.scaling.*, even layers sliding."""
    d = tiny_hf_model("gpt_oss", models_dir, **GPT_OSS_TRUNCATED)
    g = write_gguf(d, models_dir / "gpt-oss.f32.gguf", "f32")
    a = ModelArgs.from_gguf(load_weights(g)[2]["reader"], g)
    assert a.arch == "gpt-oss" and a.layer_types == ("sliding_attention", "full_attention")
    assert a.rope_scaling["rope_type"] == "yarn" and a.o_bias and a.swiglu_limit == 7.0
    tokens, logits = run_greedy(reference_for(g), PROMPT_IDS, DECODE)
    ref = hf_logits(d, tokens)
    assert rel_err(logits, ref) <= 1e-4, rel_err(logits, ref)
    assert list(ref.argmax(axis=1)[PROMPT - 1 : -1]) == tokens[PROMPT:]


def test_gpt_oss_mxfp4_checkpoint_matches_transformers(models_dir):
    """OpenAI's form: the experts as MXFP4 blocks and scales (quantization_config mxfp4), kept as
    mxfp4; transformers dequantizes the same blocks (on CPU) and gives the same logits."""
    need_transformers((5, 23), "an MXFP4 gpt-oss checkpoint")
    d = mxfp4_hf_model(tiny_hf_model("gpt_oss", models_dir), models_dir / "hf-gpt_oss-mxfp4")
    _, weights, meta = load_weights(d)
    assert weights["layers.0.exp_gate"].dtype == weights["layers.1.exp_down"].dtype == "mxfp4"
    assert not any("MXFP4" in n for n in meta["notes"])
    tokens, logits = run_greedy(reference_for(d), PROMPT_IDS, DECODE)
    ref = hf_logits(d, tokens)
    assert rel_err(logits, ref) <= 1e-4, rel_err(logits, ref)
    assert list(ref.argmax(axis=1)[PROMPT - 1 : -1]) == tokens[PROMPT:]
    # the blocks are not the bf16 weights: a reader that fell back to those would fail above
    _, plain = run_greedy(reference_for(tiny_hf_model("gpt_oss", models_dir)), PROMPT_IDS, DECODE)
    assert rel_err(logits, plain) > 1e-3


def test_gpt_oss_mxfp4_scale_out_of_kernel_range_loads_f32(models_dir, tmp_path):
    """A block whose scale is below the mxfp4 kernels' range (2^-126: FP4's 0.5 of it, 2^-127, an
    f32 subnormal) sends that tensor to f32, with a note; the values are still the MXFP4 ones."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file

    src = mxfp4_hf_model(tiny_hf_model("gpt_oss", models_dir), models_dir / "hf-gpt_oss-mxfp4")
    d = tmp_path / "tiny-scale"
    shutil.copytree(src, d)
    state = load_file(str(d / "model.safetensors"))
    name = "model.layers.0.mlp.experts.down_proj"
    state[name + "_scales"][0, 0, 0] = 1
    state[name + "_blocks"][0, 0, 0] = 0x11  # two elements of value 0.5 x 2^(1 - 127)
    save_file(state, str(d / "model.safetensors"))
    assert json.loads((d / "config.json").read_text())["quantization_config"]["quant_method"] == "mxfp4"
    _, weights, meta = load_weights(d)
    w = weights["layers.0.exp_down"]
    assert w.dtype == "f32" and weights["layers.1.exp_down"].dtype == "mxfp4"
    assert any("down_proj_blocks: MXFP4 dequantized to f32" in n for n in meta["notes"])
    assert np.ldexp(1.0, -127) in np.abs(w.dequantize()[0, :32])

"""ModelArgs from HF config dicts / files and from GGUF metadata."""

import json

import pytest

from tests.helpers.make_models import SMALL, tiny_hf_model, write_gguf
from vkdecode.errors import ModelError
from vkdecode.models.config import ModelArgs
from vkdecode.models.weights import open_gguf


def hf(arch_cls, **kw):
    return {**SMALL, "architectures": [arch_cls], **kw}


def test_hf_families():
    a = ModelArgs.from_hf_config(hf("LlamaForCausalLM", rope_theta=500000.0, tie_word_embeddings=False))
    assert (a.arch, a.attention_bias, a.qk_norm, a.rope_layout, a.rope_theta) == (
        "llama",
        False,
        False,
        "neox",
        5e5,
    )
    assert (a.q_dim, a.kv_dim, a.n_layers, a.tie_embeddings) == (64, 32, 2, False)
    q2 = ModelArgs.from_hf_config(hf("Qwen2ForCausalLM"))
    assert q2.arch == "qwen2" and q2.attention_bias and not q2.qk_norm
    q3 = ModelArgs.from_hf_config(hf("Qwen3ForCausalLM", head_dim=32))
    assert q3.arch == "qwen3" and q3.qk_norm and not q3.attention_bias and q3.head_dim == 32


def test_hf_biases():
    """attention_bias: q/k/v/o on Llama and Qwen3; Qwen2 has q/k/v whatever it says and never o;
    mlp_bias only on Llama (transformers' Qwen MLPs have no bias)."""
    flags = lambda a: (a.attention_bias, a.o_bias, a.mlp_bias)
    assert flags(ModelArgs.from_hf_config(hf("LlamaForCausalLM", attention_bias=True, mlp_bias=True))) == (
        1,
        1,
        1,
    )
    assert flags(ModelArgs.from_hf_config(hf("Qwen3ForCausalLM", attention_bias=True, mlp_bias=True))) == (
        1,
        1,
        0,
    )
    assert flags(ModelArgs.from_hf_config(hf("Qwen2ForCausalLM", attention_bias=True, mlp_bias=True))) == (
        1,
        0,
        0,
    )
    assert flags(ModelArgs.from_hf_config(hf("Qwen2ForCausalLM", attention_bias=False))) == (1, 0, 0)
    assert flags(ModelArgs.from_hf_config(hf("LlamaForCausalLM"))) == (0, 0, 0)


def test_hf_rope_parameters_v5_and_defaults():
    cfg = hf("LlamaForCausalLM", rope_parameters={"rope_type": "default", "rope_theta": 1234.0})
    del cfg["rope_theta"], cfg["head_dim"]
    a = ModelArgs.from_hf_config(cfg)
    assert a.rope_theta == 1234.0 and a.head_dim == 64 // 4


@pytest.mark.parametrize(
    "key,val,msg",
    [
        ("rope_scaling", {"rope_type": "llama3", "factor": 8.0}, "needs numbers for low_freq_factor"),
        ("rope_scaling", {"type": "linear"}, "needs numbers for factor"),
        (
            "rope_parameters",
            {"rope_type": "yarn", "rope_theta": 1e4},
            "'yarn' .* needs a positive number for factor",
        ),
        ("rope_scaling", {"rope_type": "yarn", "factor": 4.0, "truncate": "no"}, "truncate"),
        ("rope_parameters", {"rope_type": "longrope", "factor": 4.0}, "'longrope' .* not supported"),
        ("rope_scaling", {"rope_type": "dynamic", "factor": 2.0}, "'dynamic' .* not supported"),
    ],
)
def test_rope_scaling_refused(key, val, msg):
    """The refusal names the key the config actually has (transformers 5 writes only rope_parameters)."""
    with pytest.raises(ModelError, match=msg) as e:
        ModelArgs.from_hf_config(hf("LlamaForCausalLM", **{key: val}))
    assert f"(key {key!r})" in str(e.value)


LLAMA3 = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_llama3_rope_scaling_read(key):
    val = {"rope_type": "llama3", **LLAMA3}
    if key == "rope_parameters":
        val["rope_theta"] = 5e5
    cfg = hf("LlamaForCausalLM", **{key: val})
    if key == "rope_parameters":  # transformers 5 keeps theta inside rope_parameters
        del cfg["rope_theta"]
    a = ModelArgs.from_hf_config(cfg)
    assert a.rope_scaling == {"rope_type": "llama3", **LLAMA3}
    assert a.rope_theta == (5e5 if key == "rope_parameters" else 10000.0)


def test_unknown_architecture_names_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(hf("MistralForCausalLM")))
    with pytest.raises(ModelError) as e:
        ModelArgs.from_hf_config(tmp_path)
    msg = str(e.value)
    assert "MistralForCausalLM" in msg and "config.json" in msg and "LlamaForCausalLM" in msg


def test_missing_config_and_key(tmp_path):
    with pytest.raises(ModelError, match="config.json"):
        ModelArgs.from_hf_config(tmp_path)
    cfg = hf("LlamaForCausalLM")
    del cfg["hidden_size"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelError, match="'hidden_size'"):
        ModelArgs.from_hf_config(tmp_path / "config.json")


def test_gguf_args(models_dir):
    for arch, layout in (("llama", "pairs"), ("qwen3", "neox")):
        d = tiny_hf_model(arch, models_dir, tied=arch == "qwen3")
        g = write_gguf(d, models_dir / f"{arch}-cfg.f16.gguf", "f16")
        a, h = ModelArgs.from_gguf(open_gguf(str(g)), g), ModelArgs.from_hf_config(d)
        assert a.rope_layout == layout
        for f in (
            "arch",
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "n_layers",
            "n_heads",
            "n_kv_heads",
            "head_dim",
            "rope_theta",
            "tie_embeddings",
            "qk_norm",
            "attention_bias",
        ):
            assert getattr(a, f) == getattr(h, f), f
        assert a.rms_eps == pytest.approx(h.rms_eps)


def test_gguf_unknown_architecture(models_dir):
    g = write_gguf(tiny_hf_model("llama", models_dir), models_dir / "mamba.gguf", "f16", arch="mamba")
    with pytest.raises(ModelError) as e:
        ModelArgs.from_gguf(open_gguf(str(g)), g)
    assert (
        "'mamba'" in str(e.value) and "mamba.gguf" in str(e.value) and "general.architecture" in str(e.value)
    )


@pytest.mark.parametrize(
    "key,val",
    [
        ("quantization_config", {"quant_method": "gptq", "bits": 4}),
        ("quantization_config", {"quant_method": "fp8"}),
        ("rope_scaling", {"rope_type": "longrope", "factor": 4.0}),
        ("partial_rotary_factor", 0.5),
        ("logit_scale", 0.25),
        ("layer_types", ["sliding_attention", "full_attention"]),
    ],
)
def test_config_level_refusals_name_the_key(key, val):
    """Keys that need no model to test (transformers 5 rewrites some of them when it saves)."""
    with pytest.raises(ModelError) as e:
        ModelArgs.from_hf_config(hf("LlamaForCausalLM", **{key: val}))
    assert f"'{key}" in str(e.value)

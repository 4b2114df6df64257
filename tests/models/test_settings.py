"""settings.py: where a config spells one setting twice, vkdecode reads it as transformers 5 does
(same logits and next-token ids over a sequence, checked against transformers loading the very
directory) or refuses it naming both keys. The cases of issue 36 first; the random mix of every
key is test_config_property.py."""

from __future__ import annotations

import json

import pytest

from tests.helpers.config_oracle import check, checkpoint, variant
from tests.models.test_config_audit import assert_same_as_transformers, vk_greedy

GEMMA_NESTED = {
    "full_attention": {"rope_type": "default", "rope_theta": 1e6},
    "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
}
LINEAR8 = {"rope_type": "linear", "factor": 8.0}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


def model(models_dir, tmp_path, arch, edit, head="differs", drop=(), **structure):
    """A tiny checkpoint of `arch` whose saved config.json is updated with `edit`, less `drop`."""
    s = {"arch": arch, "attention_bias": False, "mlp_bias": False, "head_dim": 16, "num_key_value_heads": 2}
    src = checkpoint({**s, **structure, "head": head}, models_dir)
    cfg = json.loads((src / "config.json").read_text())
    cfg = {k: v for k, v in {**cfg, **edit}.items() if k not in drop}
    return variant(src, cfg, tmp_path / "m")


# (name, arch, config edit, keys dropped, checkpoint's lm_head, "exact" or what the refusal names)
CASES = [
    # issue 36: a rope base at the top level and inside rope_parameters: the inside one wins
    (
        "base-top-and-inside",
        "llama",
        {"rope_theta": 100.0, "rope_parameters": {"rope_theta": 1e4}},
        (),
        "differs",
        "exact",
    ),
    (
        "base-inside-and-top",
        "qwen3",
        {"rope_theta": 1e4, "rope_parameters": {"rope_theta": 100.0}},
        (),
        "differs",
        "exact",
    ),
    (
        "base-top-fills-in",
        "qwen2",
        {"rope_theta": 100.0, "rope_parameters": {"rope_type": "default"}},
        (),
        "differs",
        "exact",
    ),
    # a v4 rope_scaling replaces rope_parameters whole (its base included)
    (
        "v4-scaling-wins",
        "llama",
        {"rope_theta": 100.0, "rope_scaling": LINEAR8, "rope_parameters": {"rope_theta": 5e5}},
        (),
        "differs",
        "exact",
    ),
    (
        "scaling-type-spelling",
        "llama",
        {"rope_scaling": {"type": "linear", "factor": 4.0}},
        (),
        "differs",
        "exact",
    ),
    (
        "llama3-context-default",
        "llama",
        {"rope_parameters": {**LLAMA3, "rope_theta": 1e4}, "max_position_embeddings": 32},
        (),
        "differs",
        "exact",
    ),
    (
        "llama3-context-twice",
        "llama",
        {
            "rope_parameters": {**LLAMA3, "original_max_position_embeddings": 32},
            "original_max_position_embeddings": 16,
        },
        (),
        "differs",
        "original_max_position_embeddings",
    ),
    (
        "rope-type-null",
        "llama",
        {"rope_parameters": {"rope_type": None, "type": "linear", "factor": 2.0}},
        (),
        "differs",
        "rope_parameters.rope_type",
    ),
    (
        "per-layer-on-llama",
        "llama",
        {"rope_parameters": GEMMA_NESTED},
        (),
        "differs",
        "rope_parameters.full_attention",
    ),
    # issue 36: Gemma 3's per-layer-type rope beside top-level bases, rope_scaling, or flat
    (
        "gemma-bases-fill-in",
        "gemma3",
        {
            "rope_theta": 100.0,
            "rope_local_base_freq": 5e4,
            "rope_parameters": {
                "full_attention": {"rope_type": "default"},
                "sliding_attention": {"rope_type": "default"},
            },
        },
        (),
        "differs",
        "exact",
    ),
    (
        "gemma-per-layer-and-scaling",
        "gemma3",
        {"rope_parameters": GEMMA_NESTED, "rope_scaling": LINEAR8},
        (),
        "differs",
        "'rope_scaling'",
    ),
    (
        "gemma-flat",
        "gemma3",
        {"rope_parameters": {**LINEAR8, "rope_theta": 100.0}},
        (),
        "differs",
        "'rope_parameters'",
    ),
    (
        "gemma-v4-scaling",
        "gemma3",
        {"rope_theta": 100.0, "rope_local_base_freq": 5e4, "rope_scaling": LINEAR8},
        ("rope_parameters",),
        "differs",
        "exact",
    ),
    (
        "gemma-v4-scaling-type",
        "gemma3",
        {"rope_scaling": {"type": "linear", "factor": 8.0}},
        ("rope_parameters",),
        "differs",
        "'rope_scaling'",
    ),
    ("gemma-hidden-act-unused", "gemma3", {"hidden_act": "silu"}, (), "differs", "exact"),
    ("gemma-window-null", "gemma3", {"sliding_window": None}, (), "differs", "sliding_window"),
    # issue 36: tie_word_embeddings = true beside a stored lm_head.weight: transformers 5 keeps it
    ("tied-flag-stored-head", "llama", {"tie_word_embeddings": True}, (), "differs", "exact"),
    ("tied-flag-stored-head-gemma", "gemma3", {"tie_word_embeddings": True}, (), "differs", "exact"),
    ("tied-flag-equal-head", "qwen3", {"tie_word_embeddings": True}, (), "equal", "exact"),
    ("tied-default-no-head", "gemma3", {}, ("tie_word_embeddings",), "absent", "exact"),
    ("untied-no-head", "qwen2", {"tie_word_embeddings": False}, (), "absent", "lm_head.weight"),
    ("tie-as-string", "llama", {"tie_word_embeddings": "false"}, (), "differs", "tie_word_embeddings"),
    # defaults per architecture where a key is left out
    ("qwen3-head-dim-default", "qwen3", {}, ("head_dim",), "differs", "exact"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_spellings_read_as_transformers_or_refused(models_dir, tmp_path, case):
    name, arch, edit, drop, head, expect = case
    extra = {"head_dim": 128} if name == "qwen3-head-dim-default" else {}  # Qwen3Config's default
    out = check(model(models_dir, tmp_path, arch, edit, head, drop, **extra))
    if expect == "exact":
        assert out == "exact", out
    else:
        assert out.startswith("refused: ") and expect in out, out


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_stored_head_on_the_gpu(device, models_dir, tmp_path, arch):
    """The tied-flag-with-a-stored-head case end to end: the device's greedy ids are transformers'."""
    path = model(models_dir, tmp_path, arch, {"tie_word_embeddings": True})
    assert_same_as_transformers(path, vk_greedy(path, device))


@pytest.mark.parametrize(
    "meta,factors,expect",
    [
        ({}, False, None),
        ({"rope.scaling.type": "linear", "rope.scaling.factor": 4.0}, False, 4.0),
        ({"rope.scaling.factor": 4.0}, False, 4.0),  # llama.cpp's default type is linear
        ({"rope.scaling.type": "none", "rope.scaling.factor": 4.0}, False, None),  # never scaled
        ({"rope.scale_linear": 2.0}, False, 2.0),  # the factor's old name
        ({"rope.scaling.factor": 0.0, "rope.scale_linear": 2.0}, False, None),  # the new name wins
        ({"rope.scaling.factor": 1.0}, True, None),
        ({"rope.scaling.factor": 2.0}, True, "rope_freqs.weight"),  # llama.cpp would apply both
        ({"rope.scaling.type": "longrope", "rope.scaling.factor": 2.0}, False, "'longrope'"),
        ({"rope.scaling.type": "yarn", "rope.scaling.factor": 2.0, "context_length": 64}, False, "yarn"),
        (
            {
                "rope.scaling.type": "yarn",
                "rope.scaling.factor": 2.0,
                "rope.scaling.yarn_log_multiplier": 0.1,
            },
            False,
            "yarn_log_multiplier",
        ),
        ({"rope.scaling.type": "yarn", "rope.scaling.factor": 2.0, "context_length": 64}, True, "rope_freqs"),
    ],
)
def test_gguf_rope_spellings(meta, factors, expect):
    """GGUF rope scaling as llama.cpp's load_hparams reads it (end to end: test_config_audit)."""
    from vkdecode.errors import ModelError
    from vkdecode.models.settings import gguf_rope

    def field(name):
        return {f"llama.{k}": v for k, v in meta.items()}.get(name)

    if isinstance(expect, str) and expect != "yarn":
        with pytest.raises(ModelError, match="m.gguf: ") as e:
            gguf_rope(field, "llama", "m.gguf", factors)
        assert expect in str(e.value)
    elif expect == "yarn":  # the original context from context_length, llama.cpp's betas
        got = gguf_rope(field, "llama", "m.gguf", factors)
        assert got == {
            "rope_type": "yarn",
            "factor": 2.0,
            "truncate": True,
            "original_max_position_embeddings": 64.0,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
        }
    else:
        got = gguf_rope(field, "llama", "m.gguf", factors)
        assert got == (None if expect is None else {"rope_type": "linear", "factor": expect})

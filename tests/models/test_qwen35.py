"""Qwen3.5 (models/qwen35.py): its config read and refused, its step against transformers (the
reference, then every mode of the GPU path against the reference), prompt chunks against the token
path, the user's path against transformers' own greedy generation, and the paths refused for a
recurrent state."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import QWEN35, SMALL, hf_logits, tiny_hf_model
from tests.helpers.qwen35_checks import (
    check_multimodal_generate,
    multimodal_model,
)
from vkdecode.errors import ModelError
from vkdecode.models.config import ModelArgs
from vkdecode.models.loader import load_model
from vkdecode.models.qwen35 import FULL, LINEAR, rotary_order
from vkdecode.reference import Reference

CTX = 64


def config(**kw) -> dict:
    cfg = {**SMALL, **QWEN35, "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", **kw}
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.fixture(scope="module")
def tiny(models_dir):
    path = tiny_hf_model("qwen35", models_dir)
    return path, load_model(str(path), ctx=CTX)


def test_config_read():
    a = ModelArgs.from_hf_config(config())
    assert (a.arch, a.rotary_dim, a.linear_attn, a.qk_norm) == ("qwen3_5", 8, (2, 4, 16, 8, 4), True)
    assert a.layer_types == (LINEAR, LINEAR, FULL, LINEAR)
    # no layer_types: transformers' full_attention_interval (default 4)
    a = ModelArgs.from_hf_config(config(layer_types=None, num_hidden_layers=8, full_attention_interval=2))
    assert a.layer_types == (LINEAR, FULL) * 4
    # mrope sections change nothing for text (every section's position is the same)
    rope = {**QWEN35["rope_parameters"], "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    assert ModelArgs.from_hf_config(config(rope_parameters=rope)).rotary_dim == 8


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"layer_types": ["sliding_attention"] * 4}, "layer_types"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "yarn|rope"),
        ({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.1}}, "rotary"),  # 1 dim
        ({"linear_num_value_heads": 3}, "linear attention"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attn_output_gate": False}, "attn_output_gate"),
    ],
)
def test_config_refused(kw, msg):
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config(config(**kw))


def test_rotary_order():
    """HF's pair (i, i + r / 2) lands at the rope op's (i, i + d / 2); every dim once."""
    order = rotary_order(16, 8)
    assert sorted(order) == list(range(16))
    assert [(order[i], order[i + 8]) for i in range(4)] == [(i, i + 4) for i in range(4)]
    assert set(order[4:8]) | set(order[12:]) == set(range(8, 16))


def test_reference_matches_transformers(tiny):
    path, m = tiny
    toks = [5, 9, 17, 33, 2, 70, 11, 4, 200, 8]
    want = hf_logits(path, toks)
    ref = Reference(m.program, m.weights, dtype=np.float64)
    for p, t in enumerate(toks):
        got = ref.step(t, p)["logits"]
        # transformers' delta rule runs in float32 whatever the model's dtype
        assert np.abs(got - want[p]).max() <= 2e-4 * np.abs(want[p]).max(), f"position {p}"


def test_multimodal_checkpoint_runs_its_text_model(device, models_dir):
    """A Qwen3_5ForConditionalGeneration directory (how Qwen3.5 ships): its text_config is read,
    its text model's tensors found under model.language_model., its vision tower left alone; greedy
    tokens equal transformers' generate on the same text ids."""
    text = {**SMALL, **QWEN35, "tie_word_embeddings": False}
    path = multimodal_model(
        models_dir / "hf-qwen35-multimodal", "Qwen3_5Config", "Qwen3_5ForConditionalGeneration", text
    )
    a = ModelArgs.from_hf_config(str(path))
    assert (a.arch, a.linear_attn, a.tie_embeddings) == ("qwen3_5", (2, 4, 16, 8, 4), False)
    check_multimodal_generate(device, path, "Qwen3_5ForConditionalGeneration", CTX)


def test_kv_heads_default_is_transformers():
    """A config.json without num_key_value_heads gets Qwen3_5TextConfig's default, not all heads."""
    transformers = pytest.importorskip("transformers")
    hf = transformers.Qwen3_5TextConfig()
    a = ModelArgs.from_hf_config(config(num_key_value_heads=None, num_attention_heads=8))  # not 8
    assert a.n_kv_heads == hf.num_key_value_heads == 4

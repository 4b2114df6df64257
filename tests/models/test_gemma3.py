"""Gemma 3 configs: what is read (both rope forms, layer types from the list or the pattern) and
what is refused."""

import pytest

from tests.helpers.make_models import GEMMA3, SMALL
from vkdecode.errors import ModelError
from vkdecode.models.config import ModelArgs
from vkdecode.models.gemma3 import FULL, SLIDING


def gemma(**kw):
    cfg = {**SMALL, **GEMMA3, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", **kw}
    return {k: v for k, v in cfg.items() if v is not None}


def test_v4_form():
    a = ModelArgs.from_hf_config(gemma(rope_scaling={"rope_type": "linear", "factor": 8.0}))
    assert (a.arch, a.hidden_act, a.qk_norm, a.tie_embeddings) == ("gemma3", "gelu_tanh", True, True)
    assert (a.rope_theta, a.rope_local_theta, a.rope_scaling) == (
        1e6,
        1e4,
        {"rope_type": "linear", "factor": 8.0},
    )
    assert (a.sliding_window, a.layer_types, a.query_pre_attn_scalar) == (6, (SLIDING, FULL), 24.0)


def test_v5_form_and_pattern():
    params = {
        FULL: {"rope_type": "default", "rope_theta": 5e5},
        SLIDING: {"rope_type": "default", "rope_theta": 2e4},
    }
    a = ModelArgs.from_hf_config(
        gemma(
            rope_theta=None,
            rope_local_base_freq=None,
            rope_parameters=params,
            layer_types=None,
            sliding_window_pattern=2,
            num_hidden_layers=4,
        )
    )
    assert (a.rope_theta, a.rope_local_theta, a.rope_scaling) == (5e5, 2e4, None)
    assert a.layer_types == (SLIDING, FULL, SLIDING, FULL)
    # no layer_types and no pattern: transformers' default, every 6th layer global
    a = ModelArgs.from_hf_config(gemma(layer_types=None, num_hidden_layers=7))
    assert a.layer_types == (SLIDING,) * 5 + (FULL, SLIDING)


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"final_logit_softcapping": 30.0}, "soft-capping"),
        ({"attn_logit_softcapping": 50.0}, "soft-capping"),
        ({"use_bidirectional_attention": True}, "bidirectional"),
        ({"hidden_activation": "gelu"}, "hidden_activation"),
        ({"query_pre_attn_scalar": 0}, "query_pre_attn_scalar"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"layer_types": [SLIDING]}, "layer_types"),
        ({"layer_types": ["chunked_attention", FULL]}, "layer_types"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 8.0}}, "yarn"),
        (
            {
                "rope_parameters": {
                    FULL: {"rope_type": "default"},
                    SLIDING: {"rope_type": "linear", "factor": 2.0},
                },
                "rope_theta": None,
            },
            "sliding layers",
        ),
    ],
)
def test_refused(kw, msg):
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config(gemma(**kw))

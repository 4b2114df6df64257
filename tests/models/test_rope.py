"""RoPE tables against transformers' own init functions (modeling_rope_utils), at real sizes:
Llama 3.1 (theta 5e5, head_dim 128, factor 8, original context 8192), Llama 3.2 (factor 32),
linear scaling, YaRN as Qwen3 and gpt-oss configure it (and DeepSeek's mscale form), with its
attention factor; and llama.cpp's rope_freqs divisors give the same table."""

import numpy as np
import pytest

from tests.helpers.make_models import llama3_rope_factors
from vkdecode.models.config import ModelArgs
from vkdecode.models.rope import inv_freq, yarn_attention_factor

LLAMA31 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
LLAMA32 = {**LLAMA31, "factor": 32.0}


def _transformers(theta, head_dim, scaling):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_theta": theta, **(scaling or {"rope_type": "default"})}
    cfg = transformers.LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        rope_parameters=params,
        max_position_embeddings=131072,
    )
    kind = params["rope_type"]
    if kind == "default":
        return 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim)), 1.0
    table, factor = ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")
    return table.numpy(), factor


# the normalised dicts config_rope.py makes of Qwen3's documented YaRN, gpt-oss's config and a
# DeepSeek-style mscale pair
YARN = {"rope_type": "yarn", "beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}
QWEN3_YARN = {**YARN, "factor": 4.0, "original_max_position_embeddings": 32768.0}
GPT_OSS_YARN = {**YARN, "factor": 32.0, "original_max_position_embeddings": 4096.0, "truncate": False}
MSCALE_YARN = {**QWEN3_YARN, "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 0.707}


@pytest.mark.parametrize(
    "theta,head_dim,scaling",
    [
        (5e5, 128, LLAMA31),
        (5e5, 64, LLAMA32),
        (1e4, 16, {"rope_type": "linear", "factor": 8.0}),
        (1e6, 256, None),
        (1e6, 128, QWEN3_YARN),
        (150000.0, 64, GPT_OSS_YARN),
        (1e4, 128, MSCALE_YARN),
    ],
    ids=["llama3.1", "llama3.2", "linear", "default", "yarn-qwen3", "yarn-gpt-oss", "yarn-mscale"],
)
def test_table_equals_transformers(theta, head_dim, scaling):
    ours = inv_freq(theta, head_dim, scaling)
    want, want_factor = _transformers(theta, head_dim, scaling)
    assert ours.dtype == np.float32 and ours.shape == (head_dim // 2,)
    np.testing.assert_allclose(ours, want, rtol=3e-7, atol=0)  # an f32 ulp: numpy's pow vs torch's
    if scaling and scaling["rope_type"] == "yarn":  # kept, ramped and divided frequencies all occur
        ratio = inv_freq(theta, head_dim) / ours
        assert ratio.min() == pytest.approx(1.0) and ratio.max() == pytest.approx(scaling["factor"])
        assert ((ratio > 1.01) & (ratio < scaling["factor"] * 0.99)).any()
        assert yarn_attention_factor(scaling) == pytest.approx(want_factor, rel=1e-12) and want_factor != 1.0
    if scaling and scaling["rope_type"] == "llama3":  # all three bands occur at this size
        base = inv_freq(theta, head_dim)
        ratio = base / ours
        assert ratio.min() == pytest.approx(1.0) and ratio.max() == pytest.approx(scaling["factor"])
        assert ((ratio > 1.01) & (ratio < scaling["factor"] * 0.99)).any()


def test_gguf_rope_freqs_divisors_give_the_same_table():
    a = ModelArgs("llama", 100, 512, 256, 1, 4, 4, 128, 1e-5, 5e5, 131072, True, rope_scaling=LLAMA31)
    factors = llama3_rope_factors(a)  # what llama.cpp's converter writes
    np.testing.assert_allclose(inv_freq(5e5, 128, factors=factors), inv_freq(5e5, 128, LLAMA31), rtol=1e-6)

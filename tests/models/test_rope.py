"""RoPE tables against transformers' own init functions (modeling_rope_utils), at real sizes:
Llama 3.1 (theta 5e5, head_dim 128, factor 8, original context 8192), Llama 3.2 (factor 32),
linear scaling; and llama.cpp's rope_freqs divisors give the same table."""

import numpy as np
import pytest

from tests.helpers.make_models import llama3_rope_factors
from vkdecode.models.config import ModelArgs
from vkdecode.models.rope import inv_freq

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
        return 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    return ROPE_INIT_FUNCTIONS[kind](cfg, "cpu")[0].numpy()


@pytest.mark.parametrize(
    "theta,head_dim,scaling",
    [
        (5e5, 128, LLAMA31),
        (5e5, 64, LLAMA32),
        (1e4, 16, {"rope_type": "linear", "factor": 8.0}),
        (1e6, 256, None),
    ],
    ids=["llama3.1", "llama3.2", "linear", "default"],
)
def test_table_equals_transformers(theta, head_dim, scaling):
    ours = inv_freq(theta, head_dim, scaling)
    want = _transformers(theta, head_dim, scaling)
    assert ours.dtype == np.float32 and ours.shape == (head_dim // 2,)
    np.testing.assert_allclose(ours, want, rtol=2e-7, atol=0)
    if scaling and scaling["rope_type"] == "llama3":  # all three bands occur at this size
        base = inv_freq(theta, head_dim)
        ratio = base / ours
        assert ratio.min() == pytest.approx(1.0) and ratio.max() == pytest.approx(scaling["factor"])
        assert ((ratio > 1.01) & (ratio < scaling["factor"] * 0.99)).any()


def test_gguf_rope_freqs_divisors_give_the_same_table():
    a = ModelArgs("llama", 100, 512, 256, 1, 4, 4, 128, 1e-5, 5e5, 131072, True, rope_scaling=LLAMA31)
    factors = llama3_rope_factors(a)  # what llama.cpp's converter writes
    np.testing.assert_allclose(inv_freq(5e5, 128, factors=factors), inv_freq(5e5, 128, LLAMA31), rtol=1e-6)

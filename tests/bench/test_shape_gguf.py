"""bench/shape_gguf.py: random quant blocks written as bytes decode (by gguf's own decoder) to
finite, centred values of the intended size, and a GGUF of a real shape's settings (Llama 3 rope
scaling, untied head, the Q4_K_M mix) loads with those settings and decodes as the reference does."""

from __future__ import annotations

import numpy as np
import pytest

from bench.shape_gguf import BLOCKS, random_block_bytes, write_shape_gguf
from vkdecode.benchmark.shapes import SHAPES, shape_args, weight_dtypes


@pytest.mark.parametrize("dtype", sorted(BLOCKS))
def test_random_blocks_decode_to_small_centred_values(dtype):
    import gguf
    from gguf.quants import dequantize

    raw = random_block_bytes(dtype, 48, 512, np.random.default_rng(0))
    x = dequantize(raw, gguf.GGMLQuantizationType[dtype.upper()])
    assert x.shape == (48, 512) and np.isfinite(x).all()
    # centred within an eighth of a std (q4_0: d * (q - 8) has mean -d / 2, 0.11 std)
    assert 0.012 < x.std() < 0.03 and abs(x.mean()) < 0.125 * x.std()


# Llama-3.1-8B's settings at a width the tests can afford: 256-wide rows keep every K-quant whole
NARROW = {
    "n_layers": 2,
    "hidden_size": 256,
    "n_heads": 4,
    "n_kv_heads": 2,
    "head_dim": 64,
    "intermediate_size": 512,
    "vocab_size": 600,
}


def test_shape_gguf_keeps_the_shape_settings(device, tmp_path, monkeypatch):
    from tests.helpers.reference_run import greedy_against_reference
    from vkdecode.executors import make_executor
    from vkdecode.models.loader import load_model
    from vkdecode.models.rope import llama3_rope_factors
    from vkdecode.reference import Reference

    monkeypatch.setitem(SHAPES, "narrow-8b", {**SHAPES["llama3.1-8b"], **NARROW})
    path = write_shape_gguf(str(tmp_path / "n.gguf"), "narrow-8b", "q4_k_m")
    want = shape_args("narrow-8b")
    m = load_model(path, ctx=16)
    a = m.args
    assert (
        a.arch,
        a.n_layers,
        a.hidden_size,
        a.n_heads,
        a.n_kv_heads,
        a.head_dim,
        a.intermediate_size,
        a.vocab_size,
        a.tie_embeddings,
        a.rope_theta,
        a.rope_layout,
    ) == (want.arch, 2, 256, 4, 2, 64, 512, 600, False, 500000.0, "pairs")
    assert a.rms_eps == pytest.approx(1e-5)
    np.testing.assert_array_equal(a.rope_freq_factors, llama3_rope_factors(want))
    assert max(a.rope_freq_factors) == 8.0 and min(a.rope_freq_factors) == 1.0
    dtypes = weight_dtypes(want, "q4_k_m")
    assert {n: w.dtype for n, w in m.weights.items() if n in dtypes} == dtypes
    assert (dtypes["lm_head"], dtypes["layers.0.wv"], dtypes["layers.1.wv"]) == ("q6_k", "q4_k", "q6_k")
    with make_executor("fused", device, m.program, m.weights) as ex:
        greedy_against_reference(ex, Reference(m.program, m.weights), 6)


def test_shape_gguf_layer_count_variant(tmp_path, monkeypatch):
    """--layers keeps the shape's widths and drops layers (Llama-3.2-1B's settings, F16, tied, at
    the narrow width; the header and tensor table read back)."""
    import gguf

    monkeypatch.setitem(SHAPES, "narrow-1b", {**SHAPES["llama3.2-1b"], **NARROW})
    path = write_shape_gguf(str(tmp_path / "l1b.gguf"), "narrow-1b", "f16", n_layers=1)
    r = gguf.GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    assert int(r.fields["llama.block_count"].parts[-1][0]) == 1
    assert t["token_embd.weight"].tensor_type.name == "F16" and tuple(t["token_embd.weight"].shape) == (
        256,
        600,
    )
    assert "output.weight" not in t and "blk.1.attn_q.weight" not in t
    assert tuple(t["blk.0.attn_k.weight"].shape) == (256, 128) and tuple(
        t["blk.0.ffn_down.weight"].shape
    ) == (512, 256)
    assert t["rope_freqs.weight"].data.max() == 32.0
    x = np.asarray(t["blk.0.attn_q.weight"].data, np.float32)
    assert np.isfinite(x).all() and 0.015 < np.abs(x).min() and np.abs(x).max() < 0.032

"""bench/shape_gguf.py on Qwen3.5-35B-A3B: llama.cpp's qwen35moe names, shapes and keys (attn_q with
its gate rows, a (kernel, channels) ssm_conv1d, ssm_a = -exp(A_log), a vector ffn_gate_inp_shexp,
the ssm.* keys, no feed_forward_length) load through vkdecode.load and decode as the numpy
reference does; the full 35B-A3B and 27B files' tensor tables and sizes, without writing them."""

from __future__ import annotations

import numpy as np
import pytest

from bench.shape_gguf import write_shape_gguf
from tests.bench.test_shape_gguf_moe import decodes_as_the_reference, tensor_types
from tests.benchmark.test_shapes_qwen35 import NARROW
from vkdecode.benchmark.shapes import SHAPES, shape_args, weight_dtypes


def test_narrow_35b_a3b_gguf_decodes_as_the_reference(device, tmp_path, monkeypatch):
    """Its settings at a lavapipe width, 4 layers (three linear, one full): the file as llama.cpp's
    qwen35moe loader wants it, read back with the shape's settings and types."""
    import gguf

    from vkdecode.models.loader import load_model

    monkeypatch.setitem(SHAPES, "narrow-35b", {**SHAPES["qwen3.5-35b-a3b"], **NARROW["qwen3.5-35b-a3b"]})
    path = write_shape_gguf(str(tmp_path / "q.gguf"), "narrow-35b", "q4_k_m", n_layers=4, workers=2)
    r = gguf.GGUFReader(path)
    field = lambda k: r.fields[k].contents()
    assert field("general.architecture") == "qwen35moe" and field("qwen35moe.block_count") == 4
    keys = ("ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size")
    assert [field(f"qwen35moe.{k}") for k in keys] == [4, 128, 2, 4, 512]
    assert (field("qwen35moe.full_attention_interval"), field("qwen35moe.rope.dimension_count")) == (4, 64)
    assert field("qwen35moe.rope.dimension_sections") == [11, 11, 10, 0]
    assert field("qwen35moe.expert_shared_feed_forward_length") == 256
    assert "qwen35moe.feed_forward_length" not in r.fields  # the converter writes none
    t = {x.name: x for x in r.tensors}
    # ne order (in, out): attn_q holds q and its gate, per head; ssm_conv1d (kernel, channels)
    assert tuple(t["blk.3.attn_q.weight"].shape) == (256, 2 * 8 * 256) and "blk.3.attn_gate.weight" not in t
    assert tuple(t["blk.0.attn_qkv.weight"].shape) == (256, 2 * 2 * 128 + 4 * 128)
    assert tuple(t["blk.0.ssm_conv1d.weight"].shape) == (4, 1024) and "blk.0.attn_q.weight" not in t
    assert tuple(t["blk.0.ssm_out.weight"].shape) == (512, 256) and tuple(t["blk.0.ssm_a"].shape) == (4,)
    assert tuple(t["blk.1.ffn_gate_inp_shexp.weight"].shape) == (256,)
    assert tuple(t["blk.2.ffn_down_exps.weight"].shape) == (256, 256, 16)
    assert (np.asarray(t["blk.0.ssm_a"].data) < 0).all()
    kinds = {n: x.tensor_type.name for n, x in t.items()}
    # attn_v: the first of 4 attn_v and attn_qkv tensors, not a _more_bits one
    assert (kinds["blk.0.attn_qkv.weight"], kinds["blk.3.attn_v.weight"], kinds["output.weight"]) == (
        "Q5_K",
        "Q4_K",
        "Q6_K",
    )
    assert [kinds[f"blk.{i}.ffn_down_exps.weight"] for i in range(4)] == ["Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    f32 = ("ssm_conv1d.weight", "ssm_a", "ssm_dt.bias", "ssm_norm.weight", "ffn_gate_inp.weight")
    assert {kinds[f"blk.0.{n}"] for n in f32} == {"F32"}

    want = shape_args("narrow-35b", n_layers=4)
    m = load_model(path, ctx=24)
    a = m.args
    fields = ("arch", "n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size")
    fields += ("tie_embeddings", "rope_theta", "max_position", "layer_types", "rotary_dim", "linear_attn")
    fields += ("v_heads_tiled", "n_experts", "n_experts_used", "expert_ffn", "shared_expert_ffn")
    fields += ("norm_topk_prob", "intermediate_size")
    assert {f: getattr(a, f) for f in fields} == {f: getattr(want, f) for f in fields}
    assert a.rms_eps == pytest.approx(1e-6)
    dtypes = weight_dtypes(want, "q4_k_m")
    assert {n: w.dtype for n, w in m.weights.items() if n in dtypes} == dtypes
    decodes_as_the_reference(device, m, path)


def test_qwen35_q4_k_m_files_without_writing_them():
    """The full Q4_K_M files: 35B-A3B 733 tensors, 21.16 GB (19.71 GiB) of data, 27B 851 tensors,
    16.53 GB (15.39 GiB); q5_k attn_qkv in the linear layers, f32 norms, routers, convs and ssm vectors."""
    table, by_type = tensor_types(shape_args("qwen3.5-35b-a3b"), "q4_k_m")
    assert {k: n for k, (n, _) in by_type.items()} == {"Q4_K": 355, "Q5_K": 30, "Q6_K": 47, "float32": 301}
    assert sum(b for _, b in by_type.values()) == 21_158_128_128
    info = {name: (shape, raw.name if raw is not None else None) for name, shape, _, _, raw, _ in table}
    assert info["blk.0.ffn_down_exps.weight"] == ((256, 2048, 512 // 256 * 210), "Q6_K")
    assert info["blk.5.ffn_gate_exps.weight"] == ((256, 512, 2048 // 256 * 144), "Q4_K")
    assert info["blk.3.attn_q.weight"] == ((2 * 16 * 256, 2048 // 256 * 144), "Q4_K")
    assert info["blk.0.attn_qkv.weight"] == ((8192, 2048 // 256 * 176), "Q5_K")
    assert info["blk.0.ssm_conv1d.weight"] == ((8192, 4), None)
    assert info["blk.0.ffn_gate_inp_shexp.weight"] == ((2048,), None)
    assert len(table) == 40 * 8 + 30 * 11 + 10 * 8 + 3
    _, dense = tensor_types(shape_args("qwen3.5-27b"), "q4_k_m")
    assert {k: n for k, (n, _) in dense.items()} == {"Q4_K": 407, "Q5_K": 48, "Q6_K": 43, "float32": 353}
    assert sum(b for _, b in dense.values()) == 16_529_278_976

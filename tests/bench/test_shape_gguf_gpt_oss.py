"""bench/shape_gguf.py on gpt-oss-20b: llama.cpp's gpt-oss layout and keys (YaRN, sliding layers,
sinks, biases f32, MXFP4_MOE: mxfp4 experts and q8_0 matrices) load through vkdecode.load and decode
as the numpy reference does; the full file's tensor table and size, worked out without writing it."""

from __future__ import annotations

import pytest

from bench.shape_gguf import write_shape_gguf
from tests.bench.test_shape_gguf_moe import decodes_as_the_reference, tensor_types
from vkdecode.benchmark.shapes import SHAPES, shape_args, weight_dtypes

# gpt-oss-20b's settings (GQA 8, 4 of 32 experts, YaRN, biases, sinks) at a lavapipe width, with a
# window of 6 keys that the 8 decoded positions pass
NARROW_OSS = {
    "n_layers": 2,
    "hidden_size": 256,
    "n_heads": 8,
    "n_kv_heads": 1,
    "head_dim": 64,
    "intermediate_size": 256,
    "vocab_size": 600,
    "expert_ffn": 256,
    "sliding_window": 6,
    "layer_types": SHAPES["gpt-oss-20b"]["layer_types"][:2],
}


def test_narrow_gpt_oss_gguf_decodes_as_the_reference(device, tmp_path, monkeypatch):
    import gguf

    from vkdecode.models.loader import load_model

    monkeypatch.setitem(SHAPES, "narrow-oss", {**SHAPES["gpt-oss-20b"], **NARROW_OSS})
    path = write_shape_gguf(str(tmp_path / "o.gguf"), "narrow-oss", "mxfp4", workers=2)
    r = gguf.GGUFReader(path)
    field = lambda k: r.fields[k].contents()
    assert field("general.architecture") == "gpt-oss"
    assert (field("gpt-oss.rope.scaling.type"), field("gpt-oss.rope.scaling.factor")) == ("yarn", 32.0)
    assert field("gpt-oss.rope.scaling.original_context_length") == 4096
    assert (field("gpt-oss.attention.sliding_window"), field("gpt-oss.expert_count")) == (6, 32)
    assert field("general.file_type") == int(gguf.LlamaFileType.MOSTLY_MXFP4_MOE)
    t = {x.name: x for x in r.tensors}
    # llama.cpp's layout: ne order (in, out, experts); router, biases and sinks F32
    assert tuple(t["blk.0.ffn_down_exps.weight"].shape) == (256, 256, 32)
    assert {t[f"blk.1.ffn_{k}_exps.weight"].tensor_type.name for k in ("gate", "up", "down")} == {"MXFP4"}
    assert tuple(t["blk.0.ffn_up_exps.bias"].shape) == (256, 32)
    f32 = (
        "ffn_gate_inp.weight",
        "ffn_gate_inp.bias",
        "ffn_gate_exps.bias",
        "attn_sinks.weight",
        "attn_q.bias",
    )
    assert {t[f"blk.1.{n}"].tensor_type.name for n in f32} == {"F32"}
    assert {
        t[n].tensor_type.name for n in ("blk.0.attn_output.weight", "output.weight", "token_embd.weight")
    } == {"Q8_0"}

    want = shape_args("narrow-oss")
    m = load_model(path, ctx=24)
    a = m.args
    fields = (
        "arch",
        "n_layers",
        "hidden_size",
        "n_heads",
        "n_kv_heads",
        "head_dim",
        "vocab_size",
        "tie_embeddings",
    )
    fields += (
        "rope_theta",
        "rope_local_theta",
        "rope_scaling",
        "max_position",
        "sliding_window",
        "layer_types",
    )
    fields += ("attention_bias", "o_bias", "n_experts", "n_experts_used", "expert_ffn", "norm_topk_prob")
    fields += ("swiglu_alpha", "swiglu_limit")
    assert {f: getattr(a, f) for f in fields} == {f: getattr(want, f) for f in fields}
    assert a.layer_types == ("sliding_attention", "full_attention") and a.rms_eps == pytest.approx(1e-5)
    dtypes = weight_dtypes(want, "mxfp4")
    assert {n: w.dtype for n, w in m.weights.items() if n in dtypes} == dtypes
    assert {dtypes[f"layers.1.exp_{k}"] for k in ("gate", "up", "down")} == {"mxfp4"}
    assert {dtypes[n] for n in ("layers.0.wq", "layers.1.wo", "lm_head", "tok_embd")} == {"q8_0"}
    rest = [n for n in m.weights if n not in dtypes]
    assert "layers.1.sinks" in rest and "layers.0.exp_down_b" in rest and "layers.0.router" in rest
    assert {m.weights[n].dtype for n in rest} == {"f32"}
    decodes_as_the_reference(device, m, path)


def test_gpt_oss_20b_mxfp4_file_without_writing_it():
    """The tensor table of the gpt-oss-20b MXFP4_MOE file: 459 tensors, 12.10 GB (11.27 GiB) of data,
    as llama.cpp's gpt-oss-20b-mxfp4.gguf (12.1 GB): the 72 expert tensors mxfp4, attention and both
    token tables q8_0, routers, biases, sinks and norms f32."""
    args = shape_args("gpt-oss-20b")
    table, by_type = tensor_types(args, "mxfp4")
    assert {k: n for k, (n, _) in by_type.items()} == {"MXFP4": 72, "Q8_0": 98, "float32": 289}
    assert {k: b for k, (_, b) in by_type.items()} == {
        "MXFP4": 10_152_345_600,  # 24 x 3 x 32 experts of 2880 x 2880 at 4.25 bits
        "Q8_0": 1_907_481_600,  # attention (637 M) and the two 201088 x 2880 tables at 8.5 bits
        "float32": 36_731_136,  # routers, biases (the experts' 24 x 3 x 32 x 2880), sinks, norms
    }
    assert sum(b for _, b in by_type.values()) == 12_096_558_336
    info = {name: (shape, raw.name if raw is not None else None) for name, shape, _, _, raw, _ in table}
    assert info["blk.0.ffn_gate_exps.weight"] == ((32, 2880, 2880 // 32 * 17), "MXFP4")
    assert info["blk.23.ffn_down_exps.bias"] == ((32, 2880), None)
    assert info["blk.0.attn_q.weight"] == ((4096, 2880 // 32 * 34), "Q8_0")
    assert info["blk.0.attn_sinks.weight"] == ((64,), None) and info["blk.0.ffn_gate_inp.weight"] == (
        (32, 2880),
        None,
    )

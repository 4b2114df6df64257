"""bench/shape_gguf.py on the MoE shapes: qwen3moe GGUFs with llama.cpp's names and keys (3-D expert
tensors, an f32 router, the Q4_K_M mix) load through vkdecode.load and decode as the numpy reference
does; the Qwen3-30B-A3B file's tensor table and size, worked out without writing it."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest

from bench.shape_gguf import _tensors, write_shape_gguf
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.benchmark.shapes import SHAPES, shape_args, weight_dtypes
from vkdecode.executors import make_executor
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

# Qwen3-30B-A3B's settings at a width whose rows are whole 256-superblocks (the K-quants kept) and
# 16 experts (not 8, whose Q4_K_M mix is Mixtral's): layer 0 of 2 keeps q4_k experts, layer 1 takes
# the _more_bits q6_k ffn_down_exps
NARROW_30B = {
    "n_layers": 2,
    "hidden_size": 256,
    "n_heads": 4,
    "n_kv_heads": 1,
    "head_dim": 64,
    "vocab_size": 600,
    "n_experts": 16,
    "n_experts_used": 4,
    "expert_ffn": 256,
}


def _check_file(path, shape: str, device):
    """The file's settings and types are the shape's; fused and unfused decode as the reference."""

    want = shape_args(shape)
    m = load_model(path, ctx=24)
    a = m.args
    fields = ("arch", "n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size")
    fields += ("tie_embeddings", "rope_theta", "max_position", "n_experts", "n_experts_used", "expert_ffn")
    assert {f: getattr(a, f) for f in fields} == {f: getattr(want, f) for f in fields}
    assert a.norm_topk_prob and a.dense_layers == () and a.rms_eps == pytest.approx(1e-6)
    dtypes = weight_dtypes(want, "q4_k_m")
    assert {n: w.dtype for n, w in m.weights.items() if n in dtypes} == dtypes
    assert m.weights["layers.0.router"].dtype == "f32"
    decodes_as_the_reference(device, m, path)
    return dtypes


def test_tiny_moe_gguf_decodes_as_the_reference(device, tmp_path):
    """qwen3moe-tiny (8 experts, 64 wide): llama.cpp's 8-expert Q4_K_M types and the fallbacks of
    rows narrower than a superblock (q5_0, q5_1, q8_0) read back and decode right."""
    path = write_shape_gguf(str(tmp_path / "t.gguf"), "qwen3moe-tiny", "q4_k_m", workers=2)
    d = _check_file(path, "qwen3moe-tiny", device)
    assert (d["layers.0.wk"], d["layers.0.wv"], d["layers.0.wo"]) == ("q8_0", "q8_0", "q5_1")
    assert (d["layers.0.exp_down"], d["layers.1.exp_down"], d["layers.1.exp_up"]) == ("q5_0", "q8_0", "q5_0")


def test_narrow_30b_gguf_keeps_the_k_quant_experts(device, tmp_path, monkeypatch):
    import gguf

    monkeypatch.setitem(SHAPES, "narrow-30b", {**SHAPES["qwen3-30b-a3b"], **NARROW_30B})
    path = write_shape_gguf(str(tmp_path / "n.gguf"), "narrow-30b", "q4_k_m")
    r = gguf.GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    # llama.cpp's layout: ne order (in, out, experts), the router [n_embd, n_expert] in F32
    assert tuple(t["blk.0.ffn_gate_exps.weight"].shape) == (256, 256, 16)
    assert tuple(t["blk.0.ffn_gate_inp.weight"].shape) == (256, 16)
    assert t["blk.0.ffn_gate_inp.weight"].tensor_type.name == "F32"
    kinds = {n: x.tensor_type.name for n, x in t.items() if "exps" in n}
    assert kinds["blk.0.ffn_down_exps.weight"] == "Q4_K" and kinds["blk.1.ffn_down_exps.weight"] == "Q6_K"
    assert {kinds[f"blk.{i}.ffn_{k}_exps.weight"] for i in (0, 1) for k in ("gate", "up")} == {"Q4_K"}
    field = lambda k: r.fields[f"qwen3moe.{k}"].parts[-1][0]
    assert (field("expert_count"), field("expert_used_count"), field("expert_feed_forward_length")) == (
        16,
        4,
        256,
    )
    assert int(r.fields["general.file_type"].parts[-1][0]) == int(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    d = _check_file(path, "narrow-30b", device)
    assert (d["layers.0.wv"], d["layers.1.wv"], d["lm_head"], d["tok_embd"]) == (
        "q4_k",
        "q6_k",
        "q6_k",
        "q4_k",
    )


def test_files_do_not_depend_on_the_workers(tmp_path):
    """Each tensor draws from a generator of its own: the bytes are the same whatever the threads."""
    a = write_shape_gguf(str(tmp_path / "a.gguf"), "qwen3moe-tiny", "q4_k_m", workers=1)
    b = write_shape_gguf(str(tmp_path / "b.gguf"), "qwen3moe-tiny", "q4_k_m", workers=3)
    assert Path(a).read_bytes() == Path(b).read_bytes()


# llama.cpp's use_more_bits on 48 layers: the first and last 6, and 8, 11, ..., 41
MORE_BITS_48 = [*range(6), *range(8, 42, 3), *range(42, 48)]


def decodes_as_the_reference(device, m, path) -> None:
    """8 greedy steps unfused (packed weights) and through vkdecode.load (the user's path: fused,
    streamed weights), each against the numpy reference, the same tokens."""
    import vkdecode

    ref = Reference(m.program, m.weights)
    with make_executor("unfused", device, m.program, m.weights) as ex:
        toks = greedy_against_reference(ex, ref, 8)[0]
    with vkdecode.load(path, device=device, ctx=24) as model:
        assert model.mode == "fused"
        assert greedy_against_reference(model.executor, ref, 8)[0] == toks


def tensor_types(args, quant: str) -> tuple[list, dict]:
    """(shape_gguf's tensor table of a shape in quant, {GGUF type or numpy dtype: [tensors, bytes]}),
    without writing the file."""
    table = _tensors(args, weight_dtypes(args, quant), 0)
    by_type = collections.defaultdict(lambda: [0, 0])
    for _, _, npdt, nbytes, raw, _ in table:
        kind = raw.name if raw is not None else np.dtype(npdt).name
        by_type[kind][0] += 1
        by_type[kind][1] += nbytes
    return table, by_type


def test_qwen3_30b_a3b_q4_k_m_file_without_writing_it():
    """The tensor table of the 30B-A3B Q4_K_M file: 579 tensors, 18.55 GB (17.28 GiB) of data, as
    Qwen's own Qwen3-30B-A3B-Q4_K_M.gguf (18.6 GB): q6_k output, attn_v and ffn_down_exps in the 24
    _more_bits layers, q4_k everything else quantized, f32 norms and routers."""
    args = shape_args("qwen3-30b-a3b")
    table, by_type = tensor_types(args, "q4_k_m")
    assert {k: n for k, (n, _) in by_type.items()} == {"Q4_K": 289, "Q6_K": 49, "float32": 241}
    assert {k: b for k, (_, b) in by_type.items()} == {
        "Q4_K": 14_260_027_392,  # 25.35 G weights at 4.5 bits
        "Q6_K": 4_239_513_600,  # 5.17 G (the head, 24 ffn_down_exps and attn_v) at 6.5625 bits
        "float32": 51_175_424,  # 48 routers of 128 x 2048, the norms
    }
    assert sum(b for _, b in by_type.values()) == 18_550_716_416
    info = {name: (shape, raw.name if raw is not None else None) for name, shape, _, _, raw, _ in table}
    assert info["blk.0.ffn_down_exps.weight"] == ((128, 2048, 768 // 256 * 210), "Q6_K")
    assert info["blk.6.ffn_down_exps.weight"] == ((128, 2048, 768 // 256 * 144), "Q4_K")
    assert info["blk.47.ffn_gate_exps.weight"] == ((128, 768, 2048 // 256 * 144), "Q4_K")
    assert info["blk.0.ffn_gate_inp.weight"] == ((128, 2048), None)
    assert info["output.weight"][1] == "Q6_K" and info["token_embd.weight"][1] == "Q4_K"
    more = [i for i in range(48) if info[f"blk.{i}.ffn_down_exps.weight"][1] == "Q6_K"]
    assert more == MORE_BITS_48
    assert [i for i in range(48) if info[f"blk.{i}.attn_v.weight"][1] == "Q6_K"] == MORE_BITS_48

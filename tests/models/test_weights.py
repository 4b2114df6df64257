"""weights.py: safetensors (f32/f16/bf16, sharded) and GGUF (float + block types) to PackedWeights,
and the errors for bad files (each names the file and the tensor or key)."""

import shutil

import gguf
import numpy as np
import pytest

from tests.helpers.make_models import gguf_source, hf_state, tiny_hf_model, write_gguf
from vkdecode.errors import ModelError
from vkdecode.models.gguf_names import expected_shapes, source_name
from vkdecode.models.weights import _gguf_tensor, load_weights, open_gguf
from vkdecode.quant.kquant import quantize_raw


def check_hf_values(d, weights, args):
    state = hf_state(d)
    assert set(weights) == set(expected_shapes(args))
    for name, w in weights.items():
        assert np.array_equal(w.dequantize(), state[source_name(name, "hf")]), name


def test_hf_f32_untied(models_dir):
    d = tiny_hf_model("qwen2", models_dir)
    args, w, meta = load_weights(d)
    assert meta["format"] == "safetensors" and "lm_head" in w and "layers.1.bv" in w
    assert {x.dtype for x in w.values()} == {"f32"}
    assert w["layers.0.attn_norm"].shape == (64,) and w["layers.0.bq"].parts["data"].ndim == 1
    check_hf_values(d, w, args)


def test_hf_f16_stays_f16_norms_f32(models_dir):
    d = tiny_hf_model("qwen3", models_dir, tied=True, dtype="f16")
    args, w, _ = load_weights(d)
    assert "lm_head" not in w and w["tok_embd"].dtype == "f16" and w["layers.0.wq"].dtype == "f16"
    assert w["layers.0.q_norm"].dtype == "f32" and w["out_norm"].dtype == "f32"
    check_hf_values(d, w, args)


def test_hf_bf16_becomes_f32(models_dir):
    import torch
    from safetensors.torch import load_file

    d = tiny_hf_model("llama", models_dir, dtype="bf16")
    _, w, meta = load_weights(d)
    assert meta["source_types"]["layers.0.wq"] == "BF16" and w["layers.0.wq"].dtype == "f32"
    state = load_file(d / "model.safetensors")
    for name, pw in w.items():
        assert np.array_equal(pw.dequantize(), state[source_name(name, "hf")].to(torch.float32).numpy()), name


def test_hf_sharded(models_dir, tmp_path):
    import transformers

    d = tiny_hf_model("llama", models_dir)
    transformers.AutoModelForCausalLM.from_pretrained(d).save_pretrained(tmp_path, max_shard_size="40KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    args, w, _ = load_weights(tmp_path)
    check_hf_values(d, w, args)


@pytest.mark.parametrize(
    "arch,dtype",
    [
        ("llama", "f16"),
        ("llama", "q8_0"),
        ("llama", "q4_0"),
        ("llama", "q4_1"),
        ("llama", "q5_0"),
        ("qwen2", "q8_0"),
        ("qwen3", "q4_1"),
        ("llama", "q5_1"),
        ("qwen2", "iq4_nl"),
    ],
)
def test_gguf_roundtrip(models_dir, arch, dtype):
    d = tiny_hf_model(arch, models_dir, tied=arch == "qwen3")
    args, w, meta = load_weights(write_gguf(d, models_dir / f"{arch}.{dtype}.gguf", dtype))
    assert meta["format"] == "gguf" and not meta["notes"] and set(w) == set(expected_shapes(args))
    qt = gguf.GGMLQuantizationType[dtype.upper()]
    for name, pw in w.items():
        src = gguf_source(d, name, args)  # llama: q/k rows as the converter permutes them
        if src.ndim == 1:
            assert pw.dtype == "f32" and np.array_equal(pw.dequantize(), src), name
            continue
        assert pw.dtype == dtype, name
        if dtype == "f16":
            want = src.astype(np.float16).astype(np.float32)
        else:
            want = gguf.quants.dequantize(quantize_raw(src, dtype), qt)
        assert np.array_equal(pw.dequantize(), want), name


def single_tensor_gguf(path, name, data, raw_dtype=None):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor(name, data, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return open_gguf(str(path)).tensors[0]


@pytest.mark.parametrize("kind", ["Q4_K", "Q5_K", "Q6_K", "Q2_K", "Q3_K", "Q5_1", "IQ4_NL"])
def test_gguf_kquant_kept_quantized(tmp_path, kind):
    """K-quants (and q5_1, iq4_nl) keep their blocks: the packed weight holds the file's bytes and
    dequantizes exactly as the gguf package does."""
    from vkdecode.quant.kquant import LAYOUTS

    n, nbytes, _, _, pad = LAYOUTS[kind.lower()]
    raw = np.random.default_rng(0).integers(0, 256, (4, 512 // n * nbytes), dtype=np.uint8)
    blocks = raw.reshape(4, -1, nbytes)
    for off in {"Q6_K": (208,), "IQ4_NL": (0,), "Q2_K": (80, 82), "Q3_K": (108,)}.get(kind, (0, 2)):
        blocks[:, :, off : off + 2] = np.array([0.01], np.float16).view(np.uint8)
    qt = gguf.GGMLQuantizationType[kind]
    t = single_tensor_gguf(tmp_path / "k.gguf", "blk.0.ffn_up.weight", raw, qt)
    notes = []
    pw = _gguf_tensor(str(tmp_path / "k.gguf"), t, (4, 512), notes)
    assert pw.dtype == kind.lower() and not notes
    assert pw.nbytes == raw.nbytes // nbytes * (nbytes + pad)  # the file's bytes (+ a pad to words)
    assert np.array_equal(pw.dequantize(), gguf.quants.dequantize(raw, qt).reshape(4, 512))


def test_gguf_iq4_xs_dequantized_at_load(tmp_path):
    # no IQ4_XS kernel: f32 at load, said in the notes; random blocks (136 bytes / 256) with a sane d
    raw = np.random.default_rng(0).integers(0, 256, (4, 136), dtype=np.uint8)
    raw[:, 0:2] = np.array([0.01], np.float16).view(np.uint8)
    t = single_tensor_gguf(tmp_path / "k.gguf", "blk.0.ffn_up.weight", raw, gguf.GGMLQuantizationType.IQ4_XS)
    notes = []
    pw = _gguf_tensor(str(tmp_path / "k.gguf"), t, (4, 256), notes)
    assert pw.dtype == "f32" and "IQ4_XS" in notes[0] and "blk.0.ffn_up.weight" in notes[0]
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.IQ4_XS)
    assert np.array_equal(pw.dequantize(), want)


@pytest.mark.parametrize("e", [None, 1], ids=["mxfp4", "f32"])
def test_gguf_mxfp4(tmp_path, e):
    """MXFP4 stays mxfp4 (quant/mxfp4.py), the file's bytes on the device, unless a block with a
    nonzero value has a scale out of the kernels' range (here e = 1: 2^-127, an f32 subnormal):
    then the whole tensor is f32. Either way the values are gguf-py's, and the dtype is known
    before the tensor is packed (a LazyWeight)."""
    from vkdecode.quant.mxfp4 import NOTE_F32

    x = np.random.default_rng(0).uniform(-1, 1, (4, 256)).astype(np.float32)
    raw = gguf.quants.quantize(x, gguf.GGMLQuantizationType.MXFP4)
    if e is not None:
        raw.reshape(-1, 17)[10, :2] = (e, 0x11)  # elements 0 and 16: 1 x 2^(1 - 128)
    t = single_tensor_gguf(tmp_path / "m.gguf", "blk.0.ffn_up.weight", raw, gguf.GGMLQuantizationType.MXFP4)
    notes = []
    lazy = _gguf_tensor(str(tmp_path / "m.gguf"), t, (4, 256), notes)
    pw = lazy.packed()
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.MXFP4)
    assert lazy.dtype == pw.dtype == ("mxfp4" if e is None else "f32")
    if e is None:
        assert not notes and pw.nbytes == raw.nbytes == 4 * 8 * 17  # 8 blocks a row: 2 whole scale words
    else:
        assert notes == [f"blk.0.ffn_up.weight: {NOTE_F32}"] and np.ldexp(1.0, -127) in np.abs(want)
    assert np.array_equal(pw.dequantize().view(np.uint32), want.view(np.uint32))


def test_gguf_unsupported_type_names_tensor(tmp_path):
    t = single_tensor_gguf(tmp_path / "f64.gguf", "blk.0.ffn_up.weight", np.zeros((4, 32), np.float64))
    with pytest.raises(ModelError) as e:
        _gguf_tensor(str(tmp_path / "f64.gguf"), t, (4, 32), [])
    assert "blk.0.ffn_up.weight" in str(e.value) and "F64" in str(e.value) and "f64.gguf" in str(e.value)


# ---------------------------------------------------------------- bad input


def raises(path, *words):
    with pytest.raises(ModelError) as e:
        load_weights(path)
    for w in (str(path),) + words:
        assert w in str(e.value), (w, str(e.value))


def test_gguf_missing_tensor(models_dir):
    g = write_gguf(
        tiny_hf_model("llama", models_dir),
        models_dir / "drop.gguf",
        "f16",
        mutate=lambda n, a: None if n == "blk.1.ffn_up.weight" else a,
    )
    raises(g, "'blk.1.ffn_up.weight'", "missing")


def test_gguf_misshapen_tensor(models_dir):
    g = write_gguf(
        tiny_hf_model("llama", models_dir),
        models_dir / "shape.gguf",
        "q8_0",
        mutate=lambda n, a: a[:16] if n == "blk.0.attn_k.weight" else a,
    )
    raises(g, "'blk.0.attn_k.weight'", "shape (16, 64)", "expected (32, 64)")


@pytest.mark.parametrize(
    "keep,words",
    [
        (0.5, ("'blk.", "past the end")),  # in the tensor data
        (0.002, ("truncated",)),
    ],
)  # in the metadata
def test_gguf_truncated(models_dir, tmp_path, keep, words):
    src = write_gguf(tiny_hf_model("llama", models_dir), models_dir / "llama.f16.gguf", "f16")
    data = src.read_bytes()
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[: int(len(data) * keep)])
    raises(bad, *words)


def test_gguf_wrong_magic(models_dir, tmp_path):
    src = write_gguf(tiny_hf_model("llama", models_dir), models_dir / "llama.f16.gguf", "f16")
    bad = tmp_path / "magic.gguf"
    bad.write_bytes(b"GGML" + src.read_bytes()[4:])
    raises(bad, "magic")


def test_missing_path(tmp_path):
    raises(tmp_path / "nope.gguf", "no such file")


def rewrite_safetensors(src_dir, dst_dir, change):
    from safetensors.numpy import save_file

    shutil.copytree(src_dir, dst_dir)
    state = hf_state(src_dir)
    change(state)
    save_file(state, dst_dir / "model.safetensors")


def test_hf_missing_tensor(models_dir, tmp_path):
    d = tmp_path / "m"
    rewrite_safetensors(
        tiny_hf_model("llama", models_dir), d, lambda s: s.pop("model.layers.1.mlp.up_proj.weight")
    )
    raises(d, "'model.layers.1.mlp.up_proj.weight'", "missing")


def test_hf_misshapen_tensor(models_dir, tmp_path):
    d = tmp_path / "m"
    rewrite_safetensors(
        tiny_hf_model("llama", models_dir),
        d,
        lambda s: s.update({"model.norm.weight": np.ones(63, np.float32)}),
    )
    raises(d, "model.safetensors", "'model.norm.weight'", "(63,)", "expected (64,)")


def test_hf_truncated_safetensors(models_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(tiny_hf_model("llama", models_dir), d)
    f = d / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])
    raises(d, "model.safetensors", "truncated")

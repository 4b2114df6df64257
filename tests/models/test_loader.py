"""loader.py: load_model from an HF directory, a GGUF file, and the real SmolLM2 GGUF."""

import shutil

import numpy as np
import pytest

from tests.helpers.make_models import load_smollm2, tiny_hf_model, write_gguf
from vkdecode.errors import ContextError, ModelError
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference


def weight_names(program):
    """Weights read from the file: the program's weight values less its own constants (rope tables)."""
    return {n for n, v in program.values.items() if v.kind == "weight" and n not in program.constants}


def test_hf_dir(models_dir):
    m = load_model(tiny_hf_model("qwen2", models_dir))
    assert m.ctx == 256 and m.program.meta["ctx"] == 256  # min(4096, max_position)
    assert set(m.weights) == weight_names(m.program) and m.meta["format"] == "safetensors"
    assert m.tokenizer.eos_ids == {2}
    out = Reference(m.program, m.weights).step(m.tokenizer.encode("Hello")[0], 0)
    assert out["logits"].shape == (300,)


def test_gguf_quantized(models_dir):
    m = load_model(
        write_gguf(tiny_hf_model("qwen3", models_dir, tied=True), models_dir / "qwen3.q4_1.gguf", "q4_1"),
        ctx=32,
    )
    assert set(m.weights) == weight_names(m.program) and "lm_head" not in m.weights
    assert m.program.values["layers.0.w_up"].dtype == "q4_1" and m.program.values["tok_embd"].dtype == "q4_1"
    assert m.program.values["layers.0.k_cache"].shape == (32, 32)
    assert "reader" not in m.meta


def test_context_bounds_and_missing_tokenizer(models_dir, tmp_path):
    d = tiny_hf_model("llama", models_dir)
    with pytest.raises(ContextError):
        load_model(d, ctx=257)
    bad = tmp_path / "m"
    shutil.copytree(d, bad)
    (bad / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="tokenizer.json"):
        load_model(bad)


def test_smollm2():
    m = load_smollm2()
    a = m.args
    assert (a.arch, a.n_layers, a.hidden_size, a.n_heads, a.n_kv_heads, a.head_dim) == (
        "llama",
        30,
        576,
        9,
        3,
        64,
    )
    assert a.rope_theta == 100000.0 and a.tie_embeddings and a.rope_layout == "pairs"
    dtypes = [w.dtype for w in m.weights.values()]
    assert m.weights["tok_embd"].dtype == "q8_0" and "lm_head" not in m.weights
    assert dtypes.count("q4_1") == 210 and dtypes.count("f32") == 61 and len(dtypes) == 272
    assert m.program.ops[-2].inputs[0] == "tok_embd" and not m.meta["notes"]
    assert np.isfinite(m.weights["layers.0.w_down"].dequantize()).all()

"""bench/trim_gguf.py: a GGUF cut to its first layers and vocabulary entries loads as that smaller
model, its kept tensors byte for byte the source's, its tokenizer cut to match."""

from __future__ import annotations

import numpy as np
import pytest

from bench.trim_gguf import trim
from tests.helpers.make_models import tiny_hf_model, write_gguf
from vkdecode.models.weights import load_weights


@pytest.mark.parametrize("dtype", ["q8_0", "f16"])
def test_trimmed_gguf_keeps_the_first_layers_and_tokens(models_dir, tmp_path, dtype):
    import gguf

    src = write_gguf(tiny_hf_model("llama", models_dir), tmp_path / f"src.{dtype}.gguf", dtype)
    dst = tmp_path / "trim.gguf"
    trim(str(src), str(dst), layers=1, vocab=100)
    args, _, _ = load_weights(str(dst))
    assert args.n_layers == 1 and args.vocab_size == 100
    a, b = gguf.GGUFReader(str(src)), gguf.GGUFReader(str(dst))
    kept = {t.name: t for t in b.tensors}
    assert not any(n.startswith("blk.1.") for n in kept) and "blk.0.attn_q.weight" in kept
    for t in a.tensors:
        if t.name in kept:
            rows = 100 if t.name in ("token_embd.weight", "output.weight") else None
            np.testing.assert_array_equal(np.asarray(kept[t.name].data), np.asarray(t.data)[:rows])
    tokens = b.fields["tokenizer.ggml.tokens"]
    assert len(tokens.data) == 100

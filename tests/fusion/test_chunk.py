"""fusion/chunk.py: the prompt-chunk Program derived from the decode Program (no GPU)."""

from __future__ import annotations

import pytest

from fusion.chunk import TOKENS, ChunkError, chunk_program
from fusion.ir import Program
from tests.fusion.programs import QWEN2_0_5B, SMOLLM2_135M, build


@pytest.mark.parametrize(
    "spec", [SMOLLM2_135M.with_(n_layers=2), QWEN2_0_5B.with_(n_layers=2)], ids=["llama", "qwen2"]
)
def test_kv_tail_keeps_only_what_feeds_the_caches(spec):
    dec = build(spec)
    c = chunk_program(dec, 8)
    kinds = [o.kind for o in c.ops]
    assert "argmax" not in kinds and not c.outputs()
    assert kinds.count("kv_write") == spec.n_layers
    # the last layer's attention and FFN feed no cache: dropped; earlier layers keep theirs
    assert kinds.count("attention") == spec.n_layers - 1
    assert c.values[TOKENS].shape == (8,)
    assert c.values[c.ops[0].outputs[0]].shape == (8 * spec.hidden,)
    assert c.ops[0].kind == "embed" and c.ops[0].inputs[1] == TOKENS
    assert all(
        o.attrs.get("rows") == 8 for o in c.ops if o.kind in ("matmul", "rope", "attention", "kv_write")
    )
    # weights and caches keep their decode shapes (they are the decode executor's buffers)
    for v in c.values.values():
        if v.kind in ("weight", "state"):
            assert v.shape == dec.values[v.name].shape


def test_all_tail_has_logits_and_a_token_per_row():
    dec = build(SMOLLM2_135M.with_(n_layers=1))
    c = chunk_program(dec, 5, "all")
    last = c.ops[-1]
    assert last.kind == "argmax" and last.attrs["rows"] == 5
    assert c.values[last.inputs[0]].shape == (5 * SMOLLM2_135M.vocab,)
    assert c.values[last.outputs[0]].shape == (5,)


def test_refusals():
    dec = build(SMOLLM2_135M.with_(n_layers=1))
    with pytest.raises(ChunkError, match="width"):
        chunk_program(dec, 0)
    odd = Program("odd")
    odd.value("x", (4,), "f32", "state")
    odd.value("y", (1,), "u32", "output")
    odd.op("sample", ["x", "x"], ["y"])
    with pytest.raises(ChunkError, match="greedy"):
        chunk_program(odd, 2, "all")


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("form", ["chunk", "batch"])
def test_residual_add_and_norm_fuse_over_rows_but_not_a_bias_and_the_head_norm(form, bias):
    """ADD_RMS_NORM_CHUNK (a prompt chunk's) and ADD_RMS_NORM_ROWS (a batched step's) take each
    residual add and the norm after it (two a dense layer); Qwen3 with attention_bias adds q's
    bias (one row, broadcast over the rows) right before the per-head q norm: add_rms_norm.comp
    adds element by element, so that add stays apart."""
    from fusion.chunk_batch import batch_program
    from fusion.partition import partition
    from fusion.rules import ADD_RMS_NORM_ROWS, CHUNK_RULES
    from tests.helpers.make_models import SMALL
    from vkdecode.models import build_program
    from vkdecode.models.config import ModelArgs

    cfg = {**SMALL, "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 2, "attention_bias": bias}
    dec = build_program(ModelArgs.from_hf_config(cfg), 32)
    p = chunk_program(dec, 16, "all") if form == "chunk" else batch_program(dec, 4, 4)
    rule = "ADD_RMS_NORM_CHUNK" if form == "chunk" else "ADD_RMS_NORM_ROWS"
    regions = [r for r in partition(p, CHUNK_RULES if form == "chunk" else [ADD_RMS_NORM_ROWS]) if r.rule]
    assert [r.rule for r in regions] == [rule] * 4
    for r in regions:
        assert all(p.values[r.roles[k]].kind != "weight" for k in ("a", "b"))
        assert p.values[r.roles["a"]].numel == p.values[r.roles["sum"]].numel

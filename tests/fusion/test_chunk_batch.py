"""fusion/chunk_batch.py: the batched decode Program derived from the decode Program (no GPU), KV
caches and recurrent states alike."""

from __future__ import annotations

import pytest

from fusion.chunk import RECURRENT_KINDS, ChunkError, recurrent_states
from fusion.chunk_batch import BATCH_STEP, batch_program
from fusion.ir import STEP_WORDS
from tests.fusion.programs import QWEN2_0_5B, SMOLLM2_135M, build


@pytest.mark.parametrize(
    "spec", [SMOLLM2_135M.with_(n_layers=2), QWEN2_0_5B.with_(n_layers=2)], ids=["llama", "qwen2"]
)
def test_rows_are_sequences_over_slots(spec):
    dec = build(spec)
    b = batch_program(dec, 4, 6)
    ctx = dec.meta["ctx"]
    assert b.meta["batch_rows"] == 4 and b.meta["slots"] == 6 and b.meta["slot_rows"] == ctx
    assert "step" not in b.values and b.values[BATCH_STEP].shape == (4 * STEP_WORDS,)
    assert [o.kind for o in b.ops] == [o.kind for o in dec.ops]  # nothing dropped: every row has logits
    for o in b.ops:
        if o.kind in ("embed", "rope", "kv_write", "attention"):
            assert o.attrs["batch"] and o.attrs["rows"] == 4 and o.attrs["slot_rows"] == ctx
            assert BATCH_STEP in o.inputs
    assert b.ops[-1].kind == "argmax" and b.values[b.ops[-1].outputs[0]].shape == (4,)
    for v in b.values.values():
        if v.kind == "state":  # 6 slots of ctx rows, and a row per padding row of the widest step
            assert v.shape == (6 * ctx + 6, dec.values[v.name].shape[1])
        elif v.kind == "weight":
            assert v.shape == dec.values[v.name].shape


def test_refuses_more_rows_than_slots():
    with pytest.raises(ChunkError, match="slots"):
        batch_program(build(SMOLLM2_135M.with_(n_layers=1)), 4, 2)


def test_recurrent_states_get_a_copy_a_slot():
    """Qwen3.5's linear-attention layers: each recurrent state `slots` + 1 whole copies (the last the
    padding rows'), the recurrent ops batched; the slots' rows are the KV caches' ctx, not the size of
    the program's first state (a recurrent one)."""
    from tests.helpers.make_models import QWEN35, SMALL
    from vkdecode.models import build_program
    from vkdecode.models.config import ModelArgs

    cfg = {**SMALL, **QWEN35, "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text"}
    dec = build_program(ModelArgs.from_hf_config({k: v for k, v in cfg.items() if v is not None}), 32)
    states = recurrent_states(dec)
    assert next(v for v in dec.values.values() if v.kind == "state").name in states
    b = batch_program(dec, 4, 6)
    assert b.meta["slot_rows"] == 32
    recurrent = [o for o in b.ops if o.kind in RECURRENT_KINDS]
    assert len(recurrent) == 2 * 3  # two a linear layer
    for o in recurrent:
        assert o.attrs["batch"] and o.attrs["rows"] == 4 and o.inputs[-1] == BATCH_STEP
    for v in b.values.values():
        if v.name in states:
            assert v.shape == (7 * dec.values[v.name].numel,)
        elif v.kind == "state":
            assert v.shape == (6 * 32 + 6, dec.values[v.name].shape[1])

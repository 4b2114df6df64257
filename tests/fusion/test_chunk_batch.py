"""fusion/chunk_batch.py: the batched decode Program derived from the decode Program (no GPU)."""

from __future__ import annotations

import pytest

from fusion.chunk import ChunkError
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

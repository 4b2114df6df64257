"""executors/state_checkpoint.py: the recurrent states' copy after a prompt. That a restore gives a
chat's second turn its tokens: tests/test_prompt_cache.py and test_batch_recurrent.py; here, what
it copies, and that a device with no room for the copy costs the reuse, not the generation."""

from __future__ import annotations

import numpy as np
import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model
from vkdecode.errors import DeviceMemoryError


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    return str(tiny_hf_model("qwen35", models_dir(tmp_path_factory)))


def _states(model) -> dict:
    ex, cp = model.executor, model.kv.checkpoint
    return {
        n: ex.plan.slices[(n, "data")].read_array("float32", ex.program.values[n].numel) for n in cp.names
    }


def test_save_and_restore_copy_every_recurrent_state(device, qwen35):
    with vkdecode.load(qwen35, device=device, ctx=64) as model:
        cp = model.kv.checkpoint
        assert cp.names and all(n.endswith(("conv_state", "delta_state")) for n in cp.names)
        list(model.stream_generate(prompt_ids=[5, 9, 17, 33], max_tokens=1, prompt_cache=True))
        saved = _states(model)
        assert cp.ids == [5, 9, 17, 33] and cp.buffer.size == cp.bytes == sum(
            a.nbytes for a in saved.values()
        )
        list(model.stream_generate(prompt_ids=[7, 8, 9, 10, 11], max_tokens=4, prompt_cache=False))
        assert any(
            not np.array_equal(saved[n], a) for n, a in _states(model).items()
        )  # the live ones moved on
        cp.restore()
        assert all(np.array_equal(saved[n], a) for n, a in _states(model).items())


def test_no_room_for_the_copy_runs_prompts_whole(device, qwen35, monkeypatch):
    with vkdecode.load(qwen35, device=device, ctx=64) as model:

        def full(*args, **kwargs):
            raise DeviceMemoryError("out of device memory (test)")

        monkeypatch.setattr(model.device, "buffer", full)
        ids = [5, 9, 17, 33, 200, 201]
        first = [r.token for r in model.stream_generate(prompt_ids=ids, max_tokens=3, prompt_cache=True)]
        rs = list(model.stream_generate(prompt_ids=ids + first + [6], max_tokens=3, prompt_cache=True))
        assert model.kv.checkpoint.ids == [] and rs[-1].stats["cached_tokens"] == 0

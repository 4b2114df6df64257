"""A weight larger than maxStorageBufferRange (128 MiB on lavapipe) runs whole, split by rows."""

from __future__ import annotations

import numpy as np
import pytest

from vkdecode.benchmark.shapes import random_weight
from vkdecode.executors import make_executor
from vkdecode.models import build_program
from vkdecode.models.config import ModelArgs
from vkdecode.models.gguf_names import expected_shapes
from vkdecode.reference import Reference


@pytest.mark.parametrize("mode", ["unfused", "fused"])
def test_lm_head_beyond_the_binding_limit(device, mode):
    limit = device.info.limits["max_storage_buffer_range"]
    hidden = 512
    vocab = limit // (hidden * 4) + 4096  # an f32 lm_head just past the limit
    if vocab * hidden * 4 > 1 << 30:
        pytest.skip(f"maxStorageBufferRange {limit} is too large to exceed cheaply here")
    args = ModelArgs("llama", vocab, hidden, 256, 1, 4, 2, 128, 1e-5, 10000.0, 64, False)
    dtypes = {"lm_head": "f32"}
    rng = np.random.default_rng(0)
    weights = {
        n: random_weight(dtypes.get(n, "q8_0") if len(s) == 2 else "f32", s, rng)
        for n, s in expected_shapes(args).items()
    }
    program = build_program(args, 16, {n: w.dtype for n, w in weights.items()})
    assert program.values["lm_head"].numel * 4 > limit
    ref = Reference(program, weights)
    with make_executor(mode, device, program, weights) as ex:
        tok = 3
        for pos in range(3):
            r = ref.step(tok, pos)
            nxt = ex.step(tok, pos)
            got = ex.read_logits()
            rel = np.abs(got - r["logits"]).max() / np.abs(r["logits"]).max()
            assert rel <= 1e-4 and nxt == int(r["next_token"][0]), (pos, rel)
            tok = nxt
        # the head really ran as several row ranges, each within the limit
        ranges = [r for it in ex.items for b, r in zip(it.call.bindings, it.ranges) if b.value == "lm_head"]
        assert len(ranges) >= 2 and all(size <= limit for _, _, size in ranges)

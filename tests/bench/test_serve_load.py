"""bench/serve_load.py's record of the batched steps a load level ran (from /metrics before and
after it); the level itself runs in tests/reliability/test_serve_batch_stress.py's storm."""

from __future__ import annotations

from bench.serve_load import steps_during


def test_steps_during_a_level_per_width():
    before = {"batch_steps": {"1": 5, "4": 10}, "solo_steps": 7, "batch_width_for": {"1": 1, "3": 4}}
    after = {"batch_steps": {"1": 5, "4": 30, "8": 2}, "solo_steps": 70, "batch_width_for": {"1": 1, "3": 4}}
    before["engine_s"] = {"steps": 1.0, "prompts": 0.5, "tokens": 0.25}
    after["engine_s"] = {"steps": 1.5, "prompts": 0.5, "tokens": 0.5}
    assert steps_during(before, after) == {
        "batch_steps": {"4": 20, "8": 2},
        "solo_steps": 63,
        "batch_width_for": {"1": 1, "3": 4},
        "batch_width_ms": None,
        "engine_s": {"steps": 0.5, "prompts": 0.0, "tokens": 0.25},
    }
    assert steps_during(None, after) is None and steps_during(before, None) is None  # llama-server

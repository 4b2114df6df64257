"""Benchmark logic shared by `vkdecode bench`, `vkdecode stats` and bench/*.py.

Every mode runs the same Program, weights, prompt and token count on one Device, one mode at a time
(so only one copy of the weights is resident), after warm-up. Decoding ignores EOS, as llama-bench
does, so every mode and repetition times exactly the same steps. Never asserts timings.

    model.py        BenchModel: a model file or a bench shape with random weights, and its prompt
    runner.py       one mode timed (run_mode, decode_run), every mode (run_bench), their agreement
    machine.py      where a run ran (device, driver, date, commit); the device's copy bandwidth
    shapes.py       bench shapes: real models' dimensions with random weights
    user_path.py    the API's load + stream_generate timed, for the bench's comparison
    memory.py       host RSS and device bytes of a load against issue 33's targets (the `memory` record)

The names below are this package's API for the CLI and bench/*.py (`from vkdecode import benchmark`).
"""

from __future__ import annotations

from vkdecode.benchmark.machine import copy_bandwidth, copy_bandwidths, environment, git_commit
from vkdecode.benchmark.model import (
    PROMPT_TEXT,
    BenchModel,
    dominant_quant,
    file_model,
    random_model,
    weight_bytes_per_token,
)
from vkdecode.benchmark.runner import (
    BASELINE,
    agreement,
    decode_run,
    parse_mode,
    region_profile,
    run_bench,
    run_mode,
    spread,
    timed_fused,
)
from vkdecode.benchmark.shapes import SHAPES, shape_model
from vkdecode.benchmark.user_path import user_path
from vkdecode.stats import HOST_KEYS, executed_per_token, host_calls_per_token, mean_counters

__all__ = [
    "BASELINE",
    "HOST_KEYS",
    "PROMPT_TEXT",
    "SHAPES",
    "BenchModel",
    "agreement",
    "copy_bandwidth",
    "copy_bandwidths",
    "decode_run",
    "dominant_quant",
    "environment",
    "executed_per_token",
    "file_model",
    "git_commit",
    "host_calls_per_token",
    "mean_counters",
    "parse_mode",
    "random_model",
    "region_profile",
    "run_bench",
    "run_mode",
    "shape_model",
    "spread",
    "timed_fused",
    "user_path",
    "weight_bytes_per_token",
]

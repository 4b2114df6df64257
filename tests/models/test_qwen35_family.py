"""What every Qwen3.5-family model (linear attention with recurrent state: qwen35.py, qwen35moe.py,
qwen3next.py) must do, on each one's tiny random model: every decode mode token for token with the
reference, the user's path equal to transformers' generate, prompt chunks equal to the token path,
and speculative decode (whose verify step must be taken back out of the states) equal to plain. Each
model's own checks (config, weights, logits against transformers) stay in its test file.
"""

from __future__ import annotations

import pytest

from tests.helpers.make_models import tiny_hf_model
from tests.helpers.qwen35_checks import check_prompt_chunks, check_speculative_equals_plain, check_user_path
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.executors import make_executor
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

CTX = 64


@pytest.fixture(scope="module", params=["qwen35", "qwen35moe", "qwen3next"])
def tiny(request, models_dir):
    path = tiny_hf_model(request.param, models_dir)
    return path, load_model(str(path), ctx=CTX)


@pytest.mark.parametrize("mode", ["unfused", "replay-nofuse", "fused"])
def test_modes_match_the_reference(device, tiny, mode):
    _, m = tiny
    with make_executor(mode, device, m.program, m.weights) as ex:
        toks, _ = greedy_against_reference(ex, Reference(m.program, m.weights), 14)
    assert len(set(toks)) > 3  # not a constant run


def test_user_path_equals_transformers_generate(device, tiny):
    check_user_path(device, tiny[0], CTX)


@pytest.mark.parametrize("mode", ["unfused", "fused"])
def test_prompt_chunks_equal_the_token_path(device, tiny, mode):
    check_prompt_chunks(device, tiny[1], mode)


def test_speculative_equals_plain_decode(device, tiny):
    check_speculative_equals_plain(device, tiny[1])

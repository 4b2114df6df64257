"""Which batch width runs n sequences (executors/batch_pick.py): the cheapest that holds them,
a wider one only when clearly cheaper; a calibrated batch gives each sequence its tokens alone."""

from __future__ import annotations

import pytest

from tests.executors.test_batch import CTX, alone, batched, build, prompts
from tests.helpers.make_models import tiny_hf_model
from vkdecode.executors.batch import BatchDecode
from vkdecode.executors.batch_pick import WIDER_MARGIN, calibrate, fastest_widths, step_seconds
from vkdecode.models.loader import load_model


def test_fastest_widths_prefers_the_narrowest_unless_clearly_cheaper():
    # the H200's 8B: the 8-row step (decode matvec) dearer than the 16-row one (tensor cores)
    cost = {1: 3.0, 2: 6.1, 4: 10.2, 8: 20.8, 16: 17.0, 32: 23.0}
    pick = fastest_widths(cost)
    assert [pick[n] for n in (1, 2, 3, 4, 5, 8, 9, 16, 17, 32)] == [1, 2, 4, 4, 16, 16, 16, 16, 32, 32]
    # within the margin the narrower width stays
    near = {4: 10.0, 8: 10.0 * (1 - WIDER_MARGIN / 2)}
    assert fastest_widths(near) == {n: 4 if n <= 4 else 8 for n in range(1, 9)}
    assert fastest_widths({2: 5.0}) == {1: 2, 2: 2}


@pytest.fixture(scope="module")
def llama(models_dir):
    return load_model(tiny_hf_model("llama", models_dir), ctx=CTX)


def test_calibrated_batch_runs_wider_and_keeps_each_sequences_tokens(device, llama):
    ps = prompts((5, 9, 4))
    with build(device, llama, "fused") as dec:
        want = [alone(dec, p, n) for p, n in zip(ps, (6, 3, 5))]
        with BatchDecode(dec, (1, 2, 4)) as b:
            cost = step_seconds(b)
            assert set(cost) == {1, 2, 4} and all(c > 0 for c in cost.values())
            assert all(not ex.token_stats for ex in b.runners.values())  # calibration leaves no records
            assert sorted(calibrate(b)) == [1, 2, 3, 4]
            assert sorted(b.pick_ms) == [1, 2, 4] and all(ms > 0 for ms in b.pick_ms.values())
            b.pick = {1: 4, 2: 4, 3: 4, 4: 4}  # as if the 4-wide step were the cheapest
            assert batched(b, ps, [6, 3, 5]) == want
            assert b.steps[4] > 0 and b.steps[1] == b.steps[2] == 0


def test_step_seconds_refuses_a_live_batch(device, llama):
    with build(device, llama, "fused") as dec, BatchDecode(dec, (1, 2)) as b:
        b.join(prompts((4,))[0], None)
        with pytest.raises(RuntimeError, match="empty batch"):
            step_seconds(b)

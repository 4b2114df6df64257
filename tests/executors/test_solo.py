"""A batch's one sequence on the decoder's own step (executors/solo.py, BatchDecode solo=True): a
sequence alone runs no batched step; joined mid-generation it moves into its slot and it and the
joiner give the tokens each gives alone (greedy and seeded sampling); a batch that drains to one
goes back to solo and finishes right; the prompt cache tracks the solo rows (a second turn, and a
joiner sharing the solo sequence's prefix, run only their new tokens)."""

from __future__ import annotations

import pytest

from tests.executors.test_batch import CTX, alone, build, prompts
from tests.helpers.make_models import tiny_hf_model
from vkdecode.executors.batch import BatchDecode
from vkdecode.models.loader import load_model
from vkdecode.prompt_cache import KVPrefix
from vkdecode.sampling import SamplingParams

GREEDY = (None, None)
SAMPLED = (SamplingParams(0.9, 0, 1.0, 7), SamplingParams(1.3, 20, 0.9, 123))


@pytest.fixture(scope="module")
def tiny(models_dir):
    return load_model(tiny_hf_model("qwen2", models_dir), ctx=CTX, sampling=True)


def test_a_sequence_alone_runs_on_the_decoders_step(device, tiny):
    (ids,) = prompts((7,), seed=1)
    with build(device, tiny, "fused") as dec:
        want = alone(dec, ids, 9)
        with BatchDecode(dec, (1, 2), solo=True) as b:
            slot, first = b.join(ids, None, max_steps=8)
            dec.executor.token_stats.clear()
            got = [first] + [b.step()[slot] for _ in range(8)]
            assert b.steps == {1: 0, 2: 0} and b.solo.steps == 8 and b.solo.slot == slot
            assert len(dec.executor.token_stats) == 8  # the decoder's step ran them, bounded at 8
            b.leave(slot)
            assert b.solo.slot is None and b.free == [0, 1]
            slot, _ = b.join(ids, None)
            b.step()  # closing the batch mid-decode waits for the steps in flight
        assert alone(dec, ids, 9) == want
    assert got == want


def test_a_failed_move_into_the_slot_leaves_the_sequence_solo(device, tiny, monkeypatch):
    (ids,) = prompts((7,), seed=1)
    with build(device, tiny, "fused") as dec:
        want = alone(dec, ids, 6)
        with BatchDecode(dec, (1, 2), solo=True) as b:
            slot, first = b.join(ids, None)
            got = [first, b.step()[slot]]

            def boom(*args, **kwargs):
                raise RuntimeError("device lost")

            with monkeypatch.context() as m:
                m.setattr(b, "_copy_rows", boom)
                with pytest.raises(RuntimeError):
                    b.begin(ids, None)
            assert b.joining is None and b.solo.slot == slot  # its rows: the decoder's cache
            got += [b.step()[slot] for _ in range(4)]
    assert got == want


@pytest.mark.parametrize("mode", ["fused", "unfused"])
@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
@pytest.mark.parametrize("first_out", [0, 1], ids=["solo-leaves-first", "joiner-leaves-first"])
def test_joined_mid_generation_each_equals_alone(device, tiny, mode, params, first_out):
    """A decodes solo; B's prompt joins a piece at a time (A moves into its slot and steps batched
    in between); they step together; one leaves, the other goes back to solo and finishes."""
    ps = prompts((6, 19), seed=2)
    counts = (18, 5) if first_out else (12, 10)  # A has 8 tokens once B has joined
    with build(device, tiny, mode) as dec:
        want = [alone(dec, p, n, q) for p, n, q in zip(ps, counts, params)]
        with BatchDecode(dec, (1, 2), solo=True) as b:
            a, first = b.join(ps[0], params[0])
            got = {a: [first] + [b.step()[a] for _ in range(3)]}
            assert b.solo.steps == 3 and b.steps[1] == 0
            s = b.begin(ps[1], params[1])
            assert b.solo.slot is None and s != a
            while (joined := b.advance()) is None:
                got[a].append(b.step()[a])  # batched at width 1: B's prompt owns the decoder's cache
            assert b.steps[1] > 0
            got[s] = [joined[1]]
            order = (s, a) if first_out else (a, s)
            want_n = dict(zip((a, s), counts))
            while len(got[order[0]]) < want_n[order[0]]:
                for slot, tok in b.step().items():
                    got[slot].append(tok)
            assert b.steps[2] > 0
            b.leave(order[0])
            solo_before = b.solo.steps
            while len(got[order[1]]) < want_n[order[1]]:
                got[order[1]].append(b.step()[order[1]])
            assert b.solo.slot == order[1] and b.solo.steps > solo_before
            b.leave(order[1])
    assert [got[a], got[s]] == want


def test_the_prompt_cache_tracks_the_solo_rows(device, tiny):
    """A second turn after a solo answer reuses every row but its new tokens; a prompt that joins
    a solo sequence and starts with its rows (prompt and answer so far) reuses them too; once that
    one leaves, the cache is its, until the other goes back to solo."""
    ids, more = prompts((9, 4), seed=5)
    with build(device, tiny, "fused") as dec:
        answer = alone(dec, ids, 6)
        turn2 = ids + answer + more
        want2 = alone(dec, turn2, 5)
        kv = KVPrefix()
        with BatchDecode(dec, (1, 2), solo=True) as b:
            slot, first = b.join(ids, None, kv)
            got = [first] + [b.step()[slot] for _ in range(5)]
            assert kv.ids == ids + got[:-1] and b.steps[1] == 0
            b.leave(slot)
            assert got == answer and kv.ids == ids + answer[:-1]
            slot = b.begin(turn2, None, kv)
            assert len(kv) == len(ids) + 5  # only the last answer token and `more` run
            while (joined := b.advance(rows=8)) is None:
                pass
            got2 = [joined[1]] + [b.step()[slot] for _ in range(2)]
            # the joiner starts with the solo rows: they stay, only its new tokens run
            joiner = turn2 + want2[:3] + more
            s = b.begin(joiner, None, kv)
            assert kv.ids == turn2 + want2[:2] and b.solo.slot is None
            while (joined := b.advance(rows=8)) is None:
                pass
            got2.append(b.step()[slot])  # batched, with the joiner
            b.leave(s)
            assert kv.ids == joiner + [joined[1]]  # the cache is the leaver's
            got2.append(b.step()[slot])  # back to solo: the cache is the solo sequence's again
            assert b.solo.slot == slot and kv.ids == turn2 + got2[:-1]
    assert got2 == want2

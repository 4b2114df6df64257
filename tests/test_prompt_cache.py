"""prompt_cache.KVPrefix and stream_generate(kv=..., reuse=True): the second turn of a chat runs
only its new tokens and produces the same tokens as a run without the cache."""

from __future__ import annotations

import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.executors.base import Executor, TokenStats
from vkdecode.generate import stream_generate
from vkdecode.prompt_cache import KVPrefix
from vkdecode.stats import Counters


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


def test_reusable_prefix():
    kv = KVPrefix()
    assert kv.reusable([1, 2, 3]) == 0
    for p, t in enumerate([1, 2, 3, 4]):
        kv.wrote(t, p)
    assert kv.reusable([1, 2, 3, 4, 5]) == 4
    assert kv.reusable([1, 2, 3, 4]) == 3  # one token always runs: it yields the next token
    assert kv.reusable([1, 2, 9, 4, 5]) == 2
    assert kv.reusable([7]) == 0
    kv.keep(2)
    assert kv.ids == [1, 2]
    with pytest.raises(AssertionError):
        kv.wrote(5, 7)  # rows are written in order, or it is a bug


class FakeExecutor:
    """Next token = (token + 1) % 50; records the (token, pos) of every step."""

    mode, ctx = "fake", 64

    def __init__(self):
        self.calls, self.token_stats = [], []

    def set_sampling(self, params):
        pass

    decode = Executor.decode

    def step(self, token, pos):
        self.calls.append((token, pos))
        self.token_stats.append(TokenStats(Counters(submits=1), 1.0, 1.0, 1.0))
        return (token + 1) % 50


class FakeTokenizer:
    def __init__(self):
        self.eos_ids = {99}

    def stream(self):
        class S:
            add = staticmethod(lambda t: f"<{t}>")
            flush = staticmethod(lambda: "")

        return S()


def test_rows_tracked_and_skipped_on_a_fake_executor():
    ex, kv = FakeExecutor(), KVPrefix()
    rs = list(stream_generate(ex, FakeTokenizer(), [10, 11, 12], 4, kv=kv, reuse=True))
    assert [r.token for r in rs] == [13, 14, 15, 16]
    # the prompt and every generated token but the last went through a step
    assert kv.ids == [10, 11, 12, 13, 14, 15] and rs[-1].stats["cached_tokens"] == 0
    ex.calls.clear()
    rs2 = list(stream_generate(ex, FakeTokenizer(), [10, 11, 12, 13, 14, 15, 16, 30], 2, kv=kv, reuse=True))
    assert ex.calls[:2] == [(16, 6), (30, 7)]  # only the new prompt tokens ran
    assert rs2[-1].stats["cached_tokens"] == 6 and rs2[-1].stats["prompt_tokens"] == 8
    ex.calls.clear()
    list(stream_generate(ex, FakeTokenizer(), [10, 11, 40], 1, kv=kv, reuse=False))
    assert ex.calls == [(10, 0), (11, 1), (40, 2)] and kv.ids == [10, 11, 40]


def test_early_close_and_should_stop_keep_the_rows_exact():
    ex, kv = FakeExecutor(), KVPrefix()
    gen = stream_generate(ex, FakeTokenizer(), [1, 2], 10, kv=kv, reuse=True)
    got = [next(gen).token for _ in range(3)]  # a consumer that stops after 3 tokens
    gen.close()
    assert got == [3, 4, 5] and kv.ids == [1, 2, 3, 4]
    calls = iter([False, True])
    assert (
        list(
            stream_generate(
                ex, FakeTokenizer(), [1, 2, 7, 8], 5, kv=kv, reuse=True, should_stop=lambda: next(calls)
            )
        )
        == []
    )
    assert kv.ids == [1, 2, 7]  # one new row ran before the stop


def positions_run(model) -> int:
    """Positions the last generation ran: decode steps plus the tokens of its prompt chunks."""
    ps = model.decoder.prefill
    return len(model.executor.token_stats) + (sum(c.tokens for c in ps.chunks) if ps is not None else 0)


@pytest.mark.parametrize(
    "mode,kw",
    [("fused", {}), ("fused", {"tokens_per_submit": 4}), ("unfused", {}), ("fused", {"sampling": True})],
    ids=["fused", "fused-k4", "unfused", "fused-sampled"],
)
def test_second_turn_same_tokens_fewer_steps(device, tiny_gguf, mode, kw):
    sampled = {"temp": 0.9, "top_k": 40, "seed": 3} if kw.get("sampling") else {}
    with vkdecode.load(tiny_gguf, device=device, mode=mode, ctx=128, **kw) as model:
        tok = model.tokenizer
        turn1 = [{"role": "user", "content": "What is the capital of France?"}]
        ids1 = tok.encode(tok.apply_chat_template(turn1))
        r1 = list(model.stream_generate(prompt_ids=ids1, max_tokens=6, prompt_cache=True, **sampled))
        reply = tok.decode([r.token for r in r1 if r.finish_reason != "stop"])
        turn2 = turn1 + [{"role": "assistant", "content": reply}, {"role": "user", "content": "Hello, world"}]
        ids2 = tok.encode(tok.apply_chat_template(turn2))
        cached = list(model.stream_generate(prompt_ids=ids2, max_tokens=6, prompt_cache=True, **sampled))
        steps_cached = positions_run(model)
        fresh = list(model.stream_generate(prompt_ids=ids2, max_tokens=6, prompt_cache=False, **sampled))
        steps_fresh = positions_run(model)
    assert [r.token for r in cached] == [r.token for r in fresh]
    n_cached = cached[-1].stats["cached_tokens"]
    assert len(ids1) <= n_cached < len(ids2) and fresh[-1].stats["cached_tokens"] == 0
    assert steps_fresh - steps_cached == n_cached  # exactly the cached prompt steps were skipped


class FakeCheckpoint:
    """StateCheckpoint's bookkeeping without a device: what was saved, how often it was restored."""

    def __init__(self):
        self.ids, self.restored = [], 0

    def save(self, ids):
        self.ids = list(ids)

    def restore(self):
        self.restored += 1


def test_a_recurrent_state_reuses_only_its_checkpoint():
    kv, cp = KVPrefix(), FakeCheckpoint()
    kv.rewindable, kv.checkpoint = False, cp
    for p, t in enumerate([1, 2, 3]):
        kv.wrote(t, p)
    kv.save()  # the prompt [1, 2, 3] ran
    kv.wrote(4, 3)  # then its reply
    kv.wrote(5, 4)
    assert cp.ids == [1, 2, 3] and cp.restored == 0
    assert kv.reusable([1, 2, 3, 4, 5, 6]) == 3  # rows alone: the live state is past them
    assert kv.reusable([1, 2, 3, 7]) == 3
    assert kv.reusable([1, 2, 3]) == 0  # one token must run
    assert kv.reusable([1, 2, 9, 7]) == 0  # a shorter common prefix: no state for it
    kv.keep(3)
    assert cp.restored == 1
    kv.reset([1, 9, 3])  # another sequence's rows came back (a batch's leave)
    assert kv.reusable([1, 2, 3, 7]) == 0
    kv.clear()
    assert kv.reusable([1, 2, 3, 7]) == 0


@pytest.mark.parametrize("mode", ["fused", "unfused"])
def test_qwen35_second_turn_restores_the_prompts_state(device, tmp_path_factory, mode):
    """The second turn of a Qwen3.5 chat (its previous prompt, reply and a new message) runs from the
    first prompt's checkpoint: the same tokens as from position 0, the first prompt's steps skipped;
    a prompt that does not start with the checkpoint's runs whole and replaces it."""
    path = tiny_hf_model("qwen35", models_dir(tmp_path_factory))
    with vkdecode.load(str(path), device=device, mode=mode, ctx=64) as model:
        ids1 = [5, 9, 17, 33, 200, 201]
        r1 = [r.token for r in model.stream_generate(prompt_ids=ids1, max_tokens=5, prompt_cache=True)]
        assert 2 not in r1  # a reply of 5 tokens: the live state went through 4 of them past ids1
        ids2 = ids1 + r1 + [101, 6, 12]
        cached = list(model.stream_generate(prompt_ids=ids2, max_tokens=8, prompt_cache=True))
        steps_cached = positions_run(model)
        other = list(model.stream_generate(prompt_ids=[7, 8, 9, 10], max_tokens=3, prompt_cache=True))
        fresh = list(model.stream_generate(prompt_ids=ids2, max_tokens=8, prompt_cache=True))
        steps_fresh = positions_run(model)
    assert cached[-1].stats["cached_tokens"] == len(ids1)
    assert other[-1].stats["cached_tokens"] == 0 and fresh[-1].stats["cached_tokens"] == 0
    assert [r.token for r in cached] == [r.token for r in fresh]
    assert steps_fresh - steps_cached == len(ids1)

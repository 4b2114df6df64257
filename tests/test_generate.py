"""generate.stream_generate: stop reasons, context bounds and the run summary, on a scripted fake
executor and tokenizer (no GPU), plus one check on a real executor."""

from __future__ import annotations

import pytest

from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.errors import ContextError
from vkdecode.executors.base import Executor, TokenStats
from vkdecode.generate import GenerationResponse, stream_generate
from vkdecode.stats import Counters

EOS = 99


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


class FakeExecutor:
    """Returns scripted next tokens; records the (token, pos) it was stepped with."""

    mode = "fake"

    def __init__(self, script, ctx=64):
        self.script, self.ctx, self.calls, self.token_stats = list(script), ctx, [], []
        self.sampling = []

    def set_sampling(self, params):
        self.sampling.append(params)

    decode = Executor.decode  # the plain (waiting) decode loop over step()

    def step(self, token, pos):
        self.calls.append((token, pos))
        self.token_stats.append(TokenStats(Counters(submits=1), 10.0 + pos, 20.0, 30.0 + pos))
        return self.script[min(len(self.calls) - 1, len(self.script) - 1)]


class FakeStream:
    def add(self, tok):
        return f"<{tok}>"

    def flush(self):
        return ""


class FakeTokenizer:
    def __init__(self):
        self.eos_ids = {EOS}

    def stream(self):
        return FakeStream()


def run(script, prompt=(1, 2, 3), max_tokens=8, ctx=64, **kw):
    ex = FakeExecutor(script, ctx)
    return ex, list(stream_generate(ex, FakeTokenizer(), list(prompt), max_tokens, **kw))


def test_length_stop_yields_max_tokens():
    # prompt steps return script[0..2]; the last prompt step gives the first generated token
    ex, rs = run([0, 0, 7, 8, 9, 10, 11], max_tokens=4)
    assert [r.token for r in rs] == [7, 8, 9, 10]
    assert [r.finish_reason for r in rs] == [None, None, None, "length"]
    assert all(isinstance(r, GenerationResponse) for r in rs)
    assert "".join(r.text for r in rs) == "<7><8><9><10>"
    # each generated token is fed back at the next position
    assert ex.calls == [(1, 0), (2, 1), (3, 2), (7, 3), (8, 4), (9, 5)]
    assert len(ex.sampling) == 1 and ex.sampling[0].greedy  # greedy unless asked otherwise


def test_eos_stops_without_text():
    _, rs = run([0, 0, 7, EOS, 5], max_tokens=10)
    assert [r.token for r in rs] == [7, EOS]
    assert rs[-1].finish_reason == "stop" and rs[-1].text == ""


def test_eos_ignored_when_asked():
    _, rs = run([0, 0, 7, EOS, 5], max_tokens=4, stop_at_eos=False)
    assert [r.token for r in rs] == [7, EOS, 5, 5]
    assert rs[-1].finish_reason == "length"


def test_stops_at_end_of_context():
    ex, rs = run([4], prompt=(1, 2), max_tokens=100, ctx=6)
    assert rs[-1].finish_reason == "length"
    assert max(pos for _, pos in ex.calls) == 5  # never a step past the KV cache


def test_summary_on_last_response_only():
    _, rs = run([0, 0, 7, 8, 9], max_tokens=3, load_s=1.5)
    assert all(r.stats is None for r in rs[:-1])
    s = rs[-1].stats
    for key in (
        "mode",
        "prompt_tokens",
        "generated_tokens",
        "load_s",
        "ttft_s",
        "decode_tok_s",
        "host_us_per_token",
        "gpu_us_per_token",
        "wall_us_per_token",
        "executed_per_token",
        "host_calls_per_token",
    ):
        assert key in s
    assert (s["mode"], s["prompt_tokens"], s["generated_tokens"], s["load_s"]) == ("fake", 3, 3, 1.5)
    assert s["gpu_us_per_token"] == 20.0 and s["host_calls_per_token"]["submits"] == 1
    # wall per token is the decode wall time over the decode tokens: 1e6 / decode_tok_s
    assert s["wall_us_per_token"] == pytest.approx(1e6 / s["decode_tok_s"])
    assert s["decode_tok_s"] > 0


@pytest.mark.parametrize("prompt,ctx,match", [((), 64, "empty"), (tuple(range(9)), 8, "raise --ctx")])
def test_context_errors(prompt, ctx, match):
    with pytest.raises(ContextError, match=match):
        run([1], prompt=prompt, ctx=ctx)


def test_prompt_as_long_as_the_context_gives_one_token():
    """ctx tokens of prompt: the last prompt step runs at position ctx - 1 and its token is returned."""
    ex, rs = run([4, 4, 4, 4, 4, 4, 4, 4, 7], prompt=tuple(range(9)), max_tokens=5, ctx=9)
    assert [r.token for r in rs] == [7] and rs[-1].finish_reason == "length"
    assert max(pos for _, pos in ex.calls) == 8 and len(ex.calls) == 9


def test_real_executor_matches_step_by_step(device, tiny_gguf):
    """stream_generate on a real executor gives the tokens of stepping it by hand."""
    from vkdecode.executors import make_executor
    from vkdecode.models.loader import load_model

    m = load_model(tiny_gguf, ctx=32)
    ids = m.tokenizer.encode("Hello, world")
    with make_executor("fused", device, m.program, m.weights) as ex:
        got = [r.token for r in stream_generate(ex, m.tokenizer, ids, 5, stop_at_eos=False)]
        for pos, t in enumerate(ids):
            nxt = ex.step(t, pos)
        want = [nxt]
        for pos in range(len(ids), len(ids) + 4):
            want.append(ex.step(want[-1], pos))
    assert got == want

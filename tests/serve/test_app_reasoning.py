"""`vkdecode serve` splitting a chat answer's reasoning (message.reasoning_content,
delta.reasoning_content), through real HTTP: the tiny model with a template that opens a <think>
block (its random text is then all reasoning), on both engines, and a scripted harmony stream (random
weights write no markers) for the split itself, stop strings (the answer only) and the raw format."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx", reason="the test extra installs httpx: pip install '.[test]'")

from tests.helpers.make_models import THINK_CHATML
from tests.helpers.serve_case import QUESTION
from tests.helpers.serving import serving
from vkdecode.generate import GenerationResponse

HARMONY = ["<|channel|>", "analysis", "<|message|>", "Paris is", " the answer", "<|e", "nd|>"]
HARMONY += ["<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "It is", " Paris."]


def post(url, body, stream=False):
    """-> the answer's JSON, or the stream's chunks (every `data: {...}` event)."""
    if not stream:
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()
    with httpx.stream("POST", url + "/v1/chat/completions", json=dict(body, stream=True), timeout=120) as r:
        return [json.loads(x[6:]) for x in r.iter_lines() if x.startswith("data: {")]


def joined(chunks, key) -> str:
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks if c["choices"])


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_think_block_the_template_opened_holds_the_whole_answer(model, monkeypatch, parallel):
    monkeypatch.setattr(model.tokenizer, "chat_template", THINK_CHATML)  # before the engine copies it
    assert model.reasoning_format == "think"
    body = {"messages": QUESTION, "max_tokens": 12, "temperature": 0}
    with serving(model, parallel=parallel) as (_, url):  # --reasoning-format none: today's answer
        raw = post(url, body)
    with serving(model, parallel=parallel, reasoning="think") as (_, url):
        split, chunks = post(url, body), post(url, body, stream=True)
    text = raw["choices"][0]["message"]["content"]
    assert raw["choices"][0]["message"] == {"role": "assistant", "content": text}
    assert text.strip() and "</think>" not in text  # random text: the block never closes
    # reasoning to the end (the whitespace after <think> dropped); the finish and usage unchanged
    want = {"role": "assistant", "content": "", "reasoning_content": text.lstrip()}
    assert split["choices"][0]["message"] == want
    assert split["choices"][0]["finish_reason"] == raw["choices"][0]["finish_reason"] == "length"
    assert split["usage"]["completion_tokens"] == raw["usage"]["completion_tokens"] == 12
    assert joined(chunks, "reasoning_content") == text.lstrip() and joined(chunks, "content") == ""
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def scripted(pieces):
    """A stream_generate whose tokens' texts are `pieces` (the last one ends it, EOS)."""

    def stream_generate(*args, **kw):
        for i, text in enumerate(pieces):
            last = i == len(pieces) - 1
            yield GenerationResponse(text, 5, "stop" if last else None, {} if last else None)

    return stream_generate


def test_harmony_channels_split_and_stop_strings_end_only_the_answer(model, monkeypatch):
    monkeypatch.setattr(model, "stream_generate", scripted(HARMONY))
    body = {"messages": QUESTION, "max_tokens": 20}
    with serving(model, reasoning="harmony") as (_, url):
        whole, chunks = post(url, body), post(url, body, stream=True)
        # "is" is in the reasoning too: it ends nothing there
        stopped, stopped_chunks = post(url, dict(body, stop=["is"])), post(url, dict(body, stop="is"), True)
        completion = httpx.post(url + "/v1/completions", json={"prompt": "Hi", "max_tokens": 20}).json()
    with serving(model) as (_, url):
        raw = post(url, body)
    message = whole["choices"][0]["message"]
    assert message == {
        "role": "assistant",
        "content": "It is Paris.",
        "reasoning_content": "Paris is the answer",
    }
    assert whole["choices"][0]["finish_reason"] == "stop"
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""}
    assert (
        joined(chunks, "reasoning_content") == "Paris is the answer"
        and joined(chunks, "content") == "It is Paris."
    )
    kinds = [k for d in deltas[1:] for k in d if d[k]]
    assert kinds == sorted(kinds, reverse=True) and len(set(kinds)) == 2  # reasoning first, then the answer
    for got in (stopped["choices"][0]["message"], {"content": joined(stopped_chunks, "content")}):
        assert got["content"] == "It "
    assert stopped["choices"][0]["message"]["reasoning_content"] == "Paris is the answer"
    assert (
        stopped["choices"][0]["finish_reason"] == stopped_chunks[-1]["choices"][0]["finish_reason"] == "stop"
    )
    # completions stay raw, and so do chats on a server without a reasoning format
    assert completion["choices"][0]["text"] == "".join(HARMONY)
    assert raw["choices"][0]["message"] == {"role": "assistant", "content": "".join(HARMONY)}


def test_an_answer_sent_back_with_its_reasoning_content(model):
    """A client that sends the reasoning_content back: the template takes it or leaves it (the
    tiny model's ChatML leaves it, so the prompt is the same)."""
    turn = [*QUESTION, {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "Sure?"}]
    sent = [dict(m, reasoning_content="I know this.") if m["role"] == "assistant" else m for m in turn]
    with serving(model, reasoning="think") as (_, url):
        a = post(url, {"messages": turn, "max_tokens": 1})
        b = post(url, {"messages": sent, "max_tokens": 1})
    assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"] > 0

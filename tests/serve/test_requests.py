"""serve_requests: request bodies checked into GenRequest, refusals as OpenAI errors, and the stop-string
scanner (no GPU: a fake model with a character tokenizer)."""

from __future__ import annotations

import pytest

from vkdecode.serve.requests import ApiError, StopScanner, parse_chat, parse_completion


class FakeTokenizer:
    vocab_size = 256

    def encode(self, text):
        return [ord(c) % 256 for c in text]

    def encode_prompt(self, text):
        return self.encode(text)

    def apply_chat_template(self, messages, add_generation_prompt=True):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + (
            "<assistant>" if add_generation_prompt else ""
        )


def chat(body, ctx=64):
    return parse_chat(body, FakeTokenizer(), ctx, "m", lambda: 1234)


def completion(body, ctx=64):
    return parse_completion(body, FakeTokenizer(), ctx, "m", lambda: 1234)


MSG = [{"role": "user", "content": "hi"}]


def test_defaults_and_fields():
    r = chat({"messages": MSG})
    assert r.prompt_ids == FakeTokenizer().encode("<user>hi<assistant>")
    assert (r.temp, r.top_p, r.top_k, r.seed, r.stop, r.stream) == (1.0, 1.0, 0, 1234, [], False)
    assert r.max_tokens == 64 and r.cache_prompt  # chat: to the end of the context
    assert completion({"prompt": "abc"}).max_tokens == 16  # OpenAI's legacy default
    r = chat(
        {
            "model": "m",
            "messages": MSG,
            "temperature": 0,
            "top_p": 0.5,
            "top_k": 3,
            "seed": 9,
            "stop": "x",
            "max_completion_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
            "cache_prompt": False,
            "n": 1,
            "presence_penalty": 0,
            "logit_bias": {},
            "user": "ignored",
        }
    )
    assert (r.temp, r.top_p, r.top_k, r.seed, r.stop, r.max_tokens) == (0.0, 0.5, 3, 9, ["x"], 5)
    assert chat({"messages": MSG, "top_k": (1 << 32) - 1}).top_k == (1 << 32) - 1
    assert r.stream and r.include_usage and not r.cache_prompt
    parts = [{"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert chat({"messages": parts}).prompt_ids == FakeTokenizer().encode("<system>ab<assistant>")
    assert completion({"prompt": [[1, 2, 3]]}).prompt_ids == [1, 2, 3]
    assert completion({"prompt": ["ab"]}).prompt_ids == [97, 98]


@pytest.mark.parametrize(
    "body,param",
    [
        ({"messages": MSG, "max_tokens": 0}, "max_tokens"),
        ({"messages": MSG, "max_tokens": 2.5}, "max_tokens"),
        ({"messages": MSG, "max_tokens": True}, "max_tokens"),
        ({"messages": MSG, "temperature": -0.1}, "temperature"),
        ({"messages": MSG, "temperature": float("nan")}, "temperature"),
        ({"messages": MSG, "top_p": 1.5}, "top_p"),
        ({"messages": MSG, "top_k": -1}, "top_k"),
        ({"messages": MSG, "top_k": 1 << 32}, "top_k"),  # a uint32 on the device
        ({"messages": MSG, "seed": "7"}, "seed"),
        ({"messages": MSG, "stop": ["a"] * 17}, "stop"),
        ({"messages": MSG, "stop": [""]}, "stop"),
        ({"messages": MSG, "logprobs": True}, "logprobs"),
        ({"messages": MSG, "tools": [{"type": "function"}]}, "tools"),
        ({"messages": MSG, "response_format": {"type": "json_object"}}, "response_format"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": ["user"], "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x" * 80}]}, "messages"),  # over the context
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_chat_refusals_name_the_field(body, param):
    with pytest.raises(ApiError) as e:
        chat(body)
    assert e.value.status == 400 and e.value.param == param and e.value.message
    assert e.value.body()["error"]["type"] == "invalid_request_error"


def test_model_name_and_prompt_checks():
    with pytest.raises(ApiError) as e:
        chat({"model": "other", "messages": MSG})
    assert e.value.status == 404 and e.value.code == "model_not_found"
    with pytest.raises(ApiError) as e:
        chat({"messages": [{"role": "user", "content": "x" * 80}]})
    assert e.value.code == "context_length_exceeded"
    for prompt in ("", [], [300], ["a", "b"], 5, [True]):
        with pytest.raises(ApiError):
            completion({"prompt": prompt})


def test_chat_reasoning_fields_and_a_reasoning_content_sent_back():
    seen = []

    class Recording(FakeTokenizer):
        def apply_chat_template(self, messages, add_generation_prompt=True):
            seen.append(messages)
            return super().apply_chat_template(messages, add_generation_prompt) + "<think>"

    turns = MSG + [{"role": "assistant", "content": "Paris", "reasoning_content": "hmm"}] + MSG
    r = parse_chat({"messages": turns}, Recording(), 128, "m", lambda: 1, reasoning="think")
    assert r.reasoning == "think" and r.prompt_tail.endswith("<assistant><think>")
    # passed on under both names templates read it by (Qwen3's, gpt-oss's); other roles' dropped
    assert seen[-1][1] == {
        "role": "assistant",
        "content": "Paris",
        "reasoning_content": "hmm",
        "thinking": "hmm",
    }
    user = parse_chat({"messages": [dict(MSG[0], reasoning_content="x")]}, Recording(), 128, "m", lambda: 1)
    assert seen[-1] == MSG and user.reasoning is None and user.prompt_tail == ""
    with pytest.raises(ApiError) as e:
        chat({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 5}]})
    assert e.value.status == 400 and e.value.param == "messages[0].reasoning_content"


def run_scanner(stops, pieces):
    s, out = StopScanner(stops), []
    for p in pieces:
        text, hit = s.feed(p)
        out.append(text)
        if hit:
            return "".join(out), True
    return "".join(out) + s.flush(), False


def test_stop_scanner():
    assert run_scanner([], ["ab", "c"]) == ("abc", False)
    assert run_scanner(["END"], ["hello E", "N", "D more"]) == ("hello ", True)  # split across tokens
    assert run_scanner(["END"], ["hello E", "N", "d"]) == ("hello ENd", False)  # held back, then released
    assert run_scanner(["y", "xyz"], ["axyz"]) == ("a", True)  # the earliest stop wins
    assert run_scanner(["\n\n"], ["a\n", "b\n", "\nc"]) == ("a\nb", True)
    s = StopScanner(["abc"])
    assert s.feed("xab") == ("x", False) and s.held == "ab"  # never sends a stop's start

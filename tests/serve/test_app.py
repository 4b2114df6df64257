"""`vkdecode serve` on a tiny random model, through real HTTP on 127.0.0.1: the official `openai`
client (chat, streaming, completions, stop strings, usage), the prompt cache across chat turns, bad
input (each a 4xx OpenAI error body naming the field, before any 200, the prompt cache kept), internal
errors (a 500 that says only that), the API key, a large prompt tokenized while /health answers,
concurrent clients against the bounded queue, and a client that disconnects mid-stream. Web pages and
non-JSON bodies: test_guard.py."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

openai = pytest.importorskip("openai", reason="the test extra installs openai: pip install '.[test]'")
httpx = pytest.importorskip("httpx", reason="the test extra installs httpx: pip install '.[test]'")

import vkdecode
from tests.helpers.serve_case import QUESTION, post_all
from tests.helpers.serving import serving


@pytest.fixture(scope="module")
def server(model):
    with serving(model, max_queue=8) as (engine, url):
        yield engine, url


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server[1] + "/v1", api_key="unused", max_retries=0, timeout=120)


def _greedy_reference(device, path, messages, max_tokens) -> str:
    """The argmax build (what `vkdecode run` loads for greedy), on the same prompt."""
    with vkdecode.load(path, device=device, ctx=1024) as ref:
        tok = ref.tokenizer
        ids = tok.encode(tok.apply_chat_template(messages))
        return "".join(r.text for r in ref.stream_generate(prompt_ids=ids, max_tokens=max_tokens))


def test_openai_chat_greedy_stream_and_usage(client, device, tiny_path):
    r = client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=12, temperature=0)
    text = r.choices[0].message.content
    # temperature 0 on the sampling build gives the argmax build's tokens
    assert text == _greedy_reference(device, tiny_path, QUESTION, 12)
    assert r.choices[0].finish_reason == "length" and r.object == "chat.completion" and r.model == "tiny"
    assert r.usage.completion_tokens == 12 and r.usage.total_tokens == r.usage.prompt_tokens + 12
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=QUESTION,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"
    assert (
        chunks[-1].usage.completion_tokens == 12 and chunks[-1].usage.prompt_tokens == r.usage.prompt_tokens
    )
    # the same prompt again: all but its last token come from the KV cache
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens - 1


def test_openai_completions_and_models(client, model):
    ids = model.encode_prompt("Hello, world")
    a = client.completions.create(model="tiny", prompt="Hello, world", max_tokens=5, temperature=0)
    b = client.completions.create(model="tiny", prompt=ids, max_tokens=5, temperature=0)
    assert a.choices[0].text == b.choices[0].text and a.usage.prompt_tokens == len(ids)
    assert a.choices[0].finish_reason == "length" and a.usage.completion_tokens == 5
    streamed = "".join(
        c.choices[0].text
        for c in client.completions.create(
            model="tiny", prompt="Hello, world", max_tokens=5, temperature=0, stream=True
        )
    )
    assert streamed == a.choices[0].text
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert client.models.retrieve("tiny").id == "tiny"


def test_seeded_sampling_is_reproducible(client):
    kw = {
        "model": "tiny",
        "messages": QUESTION,
        "max_tokens": 10,
        "temperature": 0.9,
        "top_p": 0.95,
        "seed": 7,
    }
    a = client.chat.completions.create(**kw, extra_body={"top_k": 40}).choices[0].message.content
    b = client.chat.completions.create(**kw, extra_body={"top_k": 40, "cache_prompt": False})
    c = (
        client.chat.completions.create(**dict(kw, seed=8), extra_body={"top_k": 40})
        .choices[0]
        .message.content
    )
    assert a == b.choices[0].message.content and b.usage.prompt_tokens_details.cached_tokens == 0
    assert a != c  # 10 draws from ~300 tokens: another seed gives another text


def test_stop_strings(client):
    full = (
        client.completions.create(model="tiny", prompt="Hello", max_tokens=30, temperature=0).choices[0].text
    )
    stop = full[10:13]
    assert len(stop) == 3 and full.find(stop) >= 1
    for stream in (False, True):
        r = client.completions.create(
            model="tiny", prompt="Hello", max_tokens=30, temperature=0, stop=[stop, "zzzz"], stream=stream
        )
        if stream:
            chunks = list(r)
            text, reason = "".join(c.choices[0].text for c in chunks), chunks[-1].choices[0].finish_reason
        else:
            text, reason = r.choices[0].text, r.choices[0].finish_reason
        assert text == full[: full.find(stop)] and reason == "stop"


def test_second_turn_reuses_the_cache(client, server):
    engine = server[0]
    first = client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=8, temperature=0)
    turn2 = QUESTION + [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Hello, world"},
    ]
    before = engine.metrics()["tokens"]
    cached = client.chat.completions.create(model="tiny", messages=turn2, max_tokens=8, temperature=0)
    after = engine.metrics()["tokens"]
    fresh = client.chat.completions.create(
        model="tiny", messages=turn2, max_tokens=8, temperature=0, extra_body={"cache_prompt": False}
    )
    assert cached.choices[0].message.content == fresh.choices[0].message.content
    n = cached.usage.prompt_tokens_details.cached_tokens
    assert first.usage.prompt_tokens <= n < cached.usage.prompt_tokens
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    assert after["prompt_cached"] - before["prompt_cached"] == n
    assert after["prompt_run"] - before["prompt_run"] == cached.usage.prompt_tokens - n


def test_health_and_metrics(server, client):
    url = server[1]
    for _ in range(2):  # the second one takes its prompt from the cache
        client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=3, temperature=0)
    h = httpx.get(url + "/health").json()
    assert h["status"] == "ok" and h["model"] == "tiny"
    m = httpx.get(url + "/metrics").json()
    assert m["mode"] == "fused" and m["step"]["regions"] > 0 and "region_table" not in m["step"]
    assert m["last_request"]["host_calls_per_token"]["descriptor_writes"] == 0
    assert m["last_request"]["executed_per_token"]["dispatches"] == m["step"]["dispatches"]
    assert (
        m["last_request"]["decode_tok_s"] > 0 and m["tokens"]["prompt_cached"] > 0 and m["decode_tok_s"] > 0
    )
    assert m["validation_errors"] == 0
    full = httpx.get(url + "/metrics?regions=1").json()["step"]
    assert len(full["region_table"]) == full["regions"]


BAD = [
    ("/v1/chat/completions", b'{"messages": [', 400, "invalid_json"),
    ("/v1/chat/completions", b"[1, 2]", 400, "invalid_json"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, None),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, 400, None),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": "8"}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": 0}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "max_tokens": -3}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "temperature": "hot"}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "top_p": 0}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "stream": "yes"}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "stop": [1]}, 400, None),
    ("/v1/chat/completions", {"messages": QUESTION, "n": 2}, 400, "unsupported_parameter"),
    ("/v1/chat/completions", {"messages": QUESTION, "frequency_penalty": 0.5}, 400, "unsupported_parameter"),
    ("/v1/chat/completions", {"model": "gpt-4o", "messages": QUESTION}, 404, "model_not_found"),
    ("/v1/chat/completions", {"model": 3, "messages": QUESTION}, 400, None),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "the quick brown fox " * 300}]},
        400,
        "context_length_exceeded",
    ),
    ("/v1/completions", {"prompt": ""}, 400, None),
    ("/v1/completions", {"prompt": [1, 99999]}, 400, None),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, None),
    ("/v1/completions", {"prompt": "x" * (2 << 20)}, 413, "request_too_large"),
    ("/v1/nothing-here", {}, 404, "not_found"),
]


def test_bad_input_answers_4xx_and_the_server_serves_on(server, client):
    url = server[1]
    with httpx.Client(base_url=url, timeout=60) as http:
        for path, body, status, code in BAD:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            r = http.post(path, content=content, headers={"content-type": "application/json"})
            assert r.status_code == status, (path, body if len(content) < 200 else "<big>", r.text[:300])
            err = r.json()["error"]
            assert set(err) == {"message", "type", "param", "code"} and err["message"], err
            assert err["type"] == "invalid_request_error" and (code is None or err["code"] == code), err
        assert http.get("/v1/chat/completions").status_code == 405
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="no-such-model", messages=QUESTION, max_tokens=1)
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=0)
    ok = client.chat.completions.create(model="tiny", messages=QUESTION, max_tokens=2, temperature=0)
    assert ok.usage.completion_tokens == 2


def _nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


# (path, body, the field the 400 names): each once got a 500 (issue 37), top_k also cleared the cache
REFUSED_BEFORE_GENERATION = [
    ("/v1/chat/completions", b'{"max_tokens": 2, "messages": ' + _nested(5000) + b"}", "messages"),
    ("/v1/chat/completions", {"messages": QUESTION, "metadata": json.loads(_nested(40))}, "metadata"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "Paris \ud800"}]},
        "messages[0].content",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]},
        "messages[0].content[0].text",
    ),
    ("/v1/chat/completions", {"messages": [{"role": ["user"], "content": "x"}]}, "messages[0].role"),
    ("/v1/chat/completions", {"messages": QUESTION, "top_k": 1 << 32}, "top_k"),
    ("/v1/chat/completions", {"messages": QUESTION, "top_k": 1 << 64}, "top_k"),
    ("/v1/completions", {"prompt": "Hello \ud800 world"}, "prompt"),
    ("/v1/completions", {"prompt": ["\ud800"]}, "prompt[0]"),
]


def test_refused_with_400_naming_the_field_before_any_200_and_the_cache_kept(server):
    engine, url = server
    good = {"messages": QUESTION, "max_tokens": 4, "temperature": 0}
    with httpx.Client(base_url=url, timeout=60) as http:
        first = http.post("/v1/chat/completions", json=good).json()
        before = engine.metrics()
        for path, body, param in REFUSED_BEFORE_GENERATION:
            for stream in (False, True):
                if isinstance(body, bytes):
                    content = body[:-1] + (b', "stream": true}' if stream else b"}")
                else:  # json.dumps escapes the lone surrogates as \udxxx, as a client's encoder does
                    content = json.dumps(dict(body, max_tokens=2, stream=stream)).encode()
                r = http.post(path, content=content, headers={"content-type": "application/json"})
                what = (path, param, stream, r.text[:300])
                assert r.status_code == 400 and r.headers["content-type"] == "application/json", what
                err = r.json()["error"]
                assert err["param"] == param and err["type"] == "invalid_request_error", what
                assert param.split("[")[0].split(".")[0] in err["message"], what
        after = engine.metrics()
        assert after["kv_cache_tokens"] == before["kv_cache_tokens"] > 0
        assert after["requests"] == before["requests"]  # none reached the device
        again = http.post("/v1/chat/completions", json=good).json()
    assert again["choices"] == first["choices"]
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == first["usage"]["prompt_tokens"] - 1


def test_internal_errors_say_only_that_and_the_log_keeps_the_detail(model, monkeypatch):
    import logging
    import struct
    import time

    def fails(*args, **kwargs):
        yield from ()
        struct.pack("I", 1 << 32)  # what an unchecked top_k used to raise

    records = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append
    with serving(model) as (engine, url):
        logging.getLogger("uvicorn.error").addHandler(handler)  # after uvicorn configured its logging
        try:
            monkeypatch.setattr(model, "stream_generate", fails)
            monkeypatch.setattr(engine, "metrics", lambda: {}[struct])  # a KeyError in a route
            body = {"messages": QUESTION, "max_tokens": 2}
            r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
            with httpx.stream("POST", url + "/v1/chat/completions", json=dict(body, stream=True)) as s:
                events = [json.loads(x[6:]) for x in s.iter_lines() if x.startswith("data: {")]
            m = httpx.get(url + "/metrics", timeout=60)
            # the server may log an error after its response went out: wait for the three records
            deadline = time.monotonic() + 20
            while len(records) < 3 and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            logging.getLogger("uvicorn.error").removeHandler(handler)
    assert r.status_code == 500 and r.json()["error"]["code"] == "generation_failed"
    assert events[-1] == r.json()  # a stream has sent its 200: the error is its last event
    assert m.status_code == 500
    for err in (r.json()["error"], m.json()["error"]):
        assert err["type"] == "server_error" and "internal" in err["message"], err
        assert not any(w in err["message"] for w in ("struct", "format", "Error", "KeyError")), err
    logged = [logging.Formatter().format(rec) for rec in records]
    assert sum("struct.error" in t and "'I' format requires" in t for t in logged) == 2, logged
    assert any("KeyError" in t for t in logged), logged


def test_tokenizing_a_large_prompt_leaves_health_responsive(server, model):
    engine, url = server
    text = "the quick brown fox jumps over the lazy dog " * 18600  # 800 KB
    # the server's tokenizer (its encoding lets the event loop run) gives the model's ids
    for t in (text[:5000], "naïve café 東京 🙂 <|im_start|>user\nHi<|im_end|>\n"):
        assert engine.tokenizer.encode_prompt(t) == model.tokenizer.encode_prompt(t)
        assert engine.tokenizer.encode(t) == model.tokenizer.encode(t)
    done, got = threading.Event(), {}

    def big():
        t0 = time.monotonic()
        r = httpx.post(url + "/v1/completions", json={"prompt": text, "max_tokens": 1}, timeout=120)
        got["r"], got["s"] = r, time.monotonic() - t0
        done.set()

    thread = threading.Thread(target=big)
    waits = []
    with httpx.Client(base_url=url, timeout=60) as http:
        http.get("/health")  # connected
        thread.start()
        while not done.is_set():
            t0 = time.monotonic()
            assert http.get("/health").status_code == 200
            waits.append(time.monotonic() - t0)
    thread.join()
    assert got["r"].status_code == 400 and got["r"].json()["error"]["code"] == "context_length_exceeded"
    # the event loop never waited for the tokenizer: before, one /health took the whole request
    assert len(waits) >= 5 and max(waits) < max(0.1, got["s"] / 3), (got["s"], max(waits), len(waits))


def test_api_key_checked_on_every_request(model):
    with serving(model, api_key="s3cret") as (_, url):
        for path in ("/health", "/metrics", "/v1/models", "/nowhere"):
            assert httpx.get(url + path).status_code == 401
            r = httpx.get(url + path, headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(url + "/health", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=url + "/v1", api_key="s3cret", max_retries=0)
        assert (
            good.chat.completions.create(
                model="tiny", messages=QUESTION, max_tokens=2
            ).usage.completion_tokens
            == 2
        )


def test_concurrent_clients_served_in_order_or_refused(model):
    body = {"messages": QUESTION, "max_tokens": 6, "temperature": 0}
    with serving(model, max_queue=8) as (engine, url):
        got = post_all(url, [body] * 6)
        assert sorted(s for _, s, _ in got) == [200] * 6
        texts = {r["choices"][0]["message"]["content"] for _, _, r in got}
        assert len(texts) == 1  # same prompt, same greedy answer
        assert engine.started_order == sorted(engine.started_order)  # run in arrival order
    long = {"messages": QUESTION, "max_tokens": 300, "temperature": 0}
    with serving(model, max_queue=2) as (engine, url):
        got = post_all(url, [long] * 8)
        status = [s for _, s, _ in got]
        assert len(got) == 8 and set(status) <= {200, 429}  # every client answered, none lost
        assert status.count(429) >= 1 and status.count(200) >= 3  # one running + two waiting at least
        for _, s, r in got:
            if s == 429:
                assert r["error"]["code"] == "queue_full" and "--max-queue" in r["error"]["message"]
            else:
                assert r["usage"]["completion_tokens"] == 300
        m = engine.metrics()
        assert m["requests"]["completed"] == status.count(200)
        assert m["requests"]["rejected_queue_full"] == status.count(429)
        assert engine.started_order == sorted(engine.started_order)
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=60).status_code == 200


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_full_queue_answers_429_with_retry_after(model, parallel):
    """A queue of 0 places is always full: the refusal the clients see, deterministically."""
    with serving(model, max_queue=0, parallel=parallel) as (engine, url):
        r = httpx.post(url + "/v1/chat/completions", json={"messages": QUESTION, "max_tokens": 2}, timeout=60)
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        err = r.json()["error"]
        assert err["code"] == "queue_full" and err["type"] == "rate_limit_error"
        assert err["message"].startswith("too many requests") and "--max-queue" in err["message"]
        with pytest.raises(openai.RateLimitError):  # the openai package's class for a 429
            openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0).chat.completions.create(
                model="tiny", messages=QUESTION, max_tokens=2
            )
        assert engine.metrics()["requests"]["rejected_queue_full"] == 2


def test_disconnect_mid_stream_frees_the_device(model, monkeypatch):
    body = {"messages": QUESTION, "max_tokens": 1000, "temperature": 0, "stream": True}
    with serving(model) as (engine, url):
        with (
            httpx.Client(timeout=60) as http,
            http.stream("POST", url + "/v1/chat/completions", json=body) as r,
        ):
            lines = r.iter_lines()
            got = [next(lines) for _ in range(8)]
            assert all(g.startswith("data: ") or g == "" for g in got)
        t0 = time.monotonic()  # the connection is closed here
        while engine.metrics()["queue"]["running"]:
            assert time.monotonic() - t0 < 20, "the generation went on after the client left"
            time.sleep(0.02)
        m = engine.metrics()
        assert m["requests"]["cancelled"] == 1 and m["requests"]["completed"] == 0
        assert m["last_request"]["cancelled_after_tokens"] < 500  # stopped long before 1000 tokens
        r = httpx.post(url + "/v1/chat/completions", json=dict(body, stream=False, max_tokens=3), timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
        # a non-streaming client that gives up (its read times out and it closes the connection).
        # The server looks for a gone client every 0.25 s, and an H200 generated all 1000 tokens
        # before that: each token is made to take 5 ms on every device (on 2 lavapipe cores they
        # take longer anyway; a 0.5 s wait there let 330-470 tokens through, 0.2 s 145-233)
        real = model.stream_generate

        def paced(*a, **kw):
            for r in real(*a, **kw):
                time.sleep(0.005)
                yield r

        monkeypatch.setattr(model, "stream_generate", paced)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/chat/completions", json=dict(body, stream=False), timeout=0.2)
        t0 = time.monotonic()
        while engine.metrics()["requests"]["cancelled"] < 2:
            assert time.monotonic() - t0 < 20, "the generation went on after the client left"
            time.sleep(0.02)
        assert engine.metrics()["last_request"]["cancelled_after_tokens"] < 500


def test_one_access_line_per_request_with_its_tokens(server):
    """As llama-server and uvicorn: method, route, status, tokens and time, once per request,
    for a plain answer, a stream (written when the stream ends) and a refused request."""
    import logging

    _, url = server
    records = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    log = logging.getLogger("vkdecode.serve")
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        body = {"messages": QUESTION, "max_tokens": 3, "temperature": 0}
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=60).status_code == 200
        with httpx.stream(
            "POST", url + "/v1/chat/completions", json=dict(body, stream=True), timeout=60
        ) as s:
            assert s.status_code == 200 and list(s.iter_lines())
        assert httpx.post(url + "/v1/completions", json={"prompt": 5}, timeout=60).status_code == 400
        # the server thread writes a line once the response has gone out: the client may be first
        deadline = time.monotonic() + 10
        while len(records) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        log.removeHandler(handler)
        log.setLevel(old_level)
    lines = [r.getMessage() for r in records]
    assert len(lines) == 3, lines
    for line in lines[:2]:
        assert re.fullmatch(
            r"POST /v1/chat/completions 200 prompt \d+ \(cached \d+\) completion 3 in [\d.]+ s", line
        )
    assert re.fullmatch(r"POST /v1/completions 400 in [\d.]+ s", lines[2]), lines[2]

"""`vkdecode serve` on a tiny random model, through real HTTP on 127.0.0.1: the official `openai`
client (chat, streaming, completions, stop strings, usage), the prompt cache across chat turns, bad
input (each a 4xx OpenAI error body, the server serving on), the API key, concurrent clients against
the bounded queue, and a client that disconnects mid-stream."""

from __future__ import annotations

import json
import threading
import time

import pytest

openai = pytest.importorskip("openai", reason="the test extra installs openai: pip install '.[test]'")
httpx = pytest.importorskip("httpx", reason="the test extra installs httpx: pip install '.[test]'")

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from tests.helpers.serving import serving

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
EOS_ID = 2  # <|im_end|> in the tiny tokenizer


def _no_eos(name, a):
    """The output row of EOS zeroed: greedy never picks it, so generations run to max_tokens."""
    if name == "output.weight":
        a = a.copy()
        a[EOS_ID] = 0
    return a


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    hf = tiny_hf_model("llama", d, tied=False, max_position_embeddings=1024)
    return str(write_gguf(hf, d / "llama-untied-noeos.q8_0.gguf", "q8_0", mutate=_no_eos))


@pytest.fixture(scope="module")
def model(device, tiny_path):
    with vkdecode.load(tiny_path, device=device, ctx=1024, sampling=True) as m:
        yield m


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


def test_cors_preflight_passes_before_the_key_check(model):
    with serving(model, api_key="k", allow_origins=["http://localhost:3000"]) as (_, url):
        pre = httpx.options(
            url + "/v1/chat/completions",
            headers={
                "Origin": "http://localhost:3000",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert (
            pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "http://localhost:3000"
        )
        r = httpx.get(
            url + "/v1/models", headers={"Origin": "http://localhost:3000", "Authorization": "Bearer k"}
        )
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://localhost:3000"
        other = httpx.options(
            url + "/v1/models",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "GET"},
        )
        assert "access-control-allow-origin" not in other.headers


def _post_all(url, bodies, timeout=120):
    """Posts every body from its own thread at once; -> [(index, status, json)] in completion order."""
    out, lock = [], threading.Lock()

    def one(i, body):
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=timeout)
        with lock:
            out.append((i, r.status_code, r.json()))

    threads = [threading.Thread(target=one, args=(i, b)) for i, b in enumerate(bodies)]
    for t in threads:
        t.start()
        time.sleep(0.01)  # distinct arrival times
    for t in threads:
        t.join(timeout + 10)
    assert not any(t.is_alive() for t in threads), "a client hung"
    return out


def test_concurrent_clients_served_in_order_or_refused(model):
    body = {"messages": QUESTION, "max_tokens": 6, "temperature": 0}
    with serving(model, max_queue=8) as (engine, url):
        got = _post_all(url, [body] * 6)
        assert sorted(s for _, s, _ in got) == [200] * 6
        texts = {r["choices"][0]["message"]["content"] for _, _, r in got}
        assert len(texts) == 1  # same prompt, same greedy answer
        assert engine.started_order == sorted(engine.started_order)  # run in arrival order
    long = {"messages": QUESTION, "max_tokens": 300, "temperature": 0}
    with serving(model, max_queue=2) as (engine, url):
        got = _post_all(url, [long] * 8)
        status = [s for _, s, _ in got]
        assert len(got) == 8 and set(status) <= {200, 503}  # every client answered, none lost
        assert status.count(503) >= 1 and status.count(200) >= 3  # one running + two waiting at least
        for _, s, r in got:
            if s == 503:
                assert r["error"]["code"] == "queue_full" and "--max-queue" in r["error"]["message"]
            else:
                assert r["usage"]["completion_tokens"] == 300
        m = engine.metrics()
        assert m["requests"]["completed"] == status.count(200)
        assert m["requests"]["rejected_queue_full"] == status.count(503)
        assert engine.started_order == sorted(engine.started_order)
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=60).status_code == 200


def test_disconnect_mid_stream_frees_the_device(model):
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
        # a non-streaming client that gives up (its read times out and it closes the connection);
        # 0.2 s: on 2 lavapipe cores a 0.5 s wait let 330-470 tokens through before the server
        # noticed, at the edge of the bound below (it failed CI once); 0.2 s lets 145-233 through
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/chat/completions", json=dict(body, stream=False), timeout=0.2)
        t0 = time.monotonic()
        while engine.metrics()["requests"]["cancelled"] < 2:
            assert time.monotonic() - t0 < 20, "the generation went on after the client left"
            time.sleep(0.02)
        assert engine.metrics()["last_request"]["cancelled_after_tokens"] < 500

"""What the server refuses before parsing a request: web pages not allowed by --allow-origin (403),
bodies that are not JSON (415), JSON nested too deep or holding lone UTF-16 surrogates (400 naming
the field). The HTTP cases against a real server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

httpx = pytest.importorskip("httpx", reason="the test extra installs httpx: pip install '.[test]'")
pytest.importorskip("starlette", reason="the serve extra installs starlette: pip install '.[serve]'")

from tests.helpers.serve_case import QUESTION
from tests.helpers.serving import serving
from vkdecode.serve.guard import MAX_DEPTH, check_json, decode_json
from vkdecode.serve.requests import ApiError

PAGE = "http://localhost:3000"
CHAT = {"messages": QUESTION, "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def server(model):
    with serving(model) as (engine, url):
        yield engine, url


def test_a_web_page_cannot_drive_the_server(server):
    """A browser's simple POST (text/plain, no preflight) from any page open on the machine."""
    engine, url = server
    before = engine.metrics()["requests"]
    with httpx.Client(base_url=url, timeout=60) as http:
        page = {"Origin": "http://evil.example"}
        simple = http.post("/v1/chat/completions", content=json.dumps(CHAT), headers=page)
        as_json = http.post("/v1/chat/completions", json=CHAT, headers=page)
        null = http.post("/v1/completions", json={"prompt": "Hi"}, headers={"Origin": "null"})
        for r in (simple, as_json, null, http.get("/v1/models", headers=page)):
            assert r.status_code == 403 and r.json()["error"]["code"] == "origin_not_allowed", r.text
            assert "--allow-origin" in r.json()["error"]["message"]
            assert "access-control-allow-origin" not in r.headers
        # no Origin header (curl, the openai client, other servers): served
        assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
    after = engine.metrics()["requests"]
    assert after["completed"] == before["completed"] + 1 and after["failed"] == before["failed"]


@pytest.mark.parametrize(
    "headers",
    [
        {"content-type": "text/plain"},  # a browser's simple request
        {"content-type": "application/x-www-form-urlencoded"},  # curl -d, an HTML form
        {"content-type": "multipart/form-data; boundary=x"},
        {},  # no Content-Type: fetch() with a Blob body
    ],
    ids=["text", "form", "multipart", "none"],
)
def test_only_json_bodies(server, headers):
    engine, url = server
    before = engine.metrics()["requests"]
    for path in ("/v1/chat/completions", "/v1/completions"):
        r = httpx.post(url + path, content=json.dumps(CHAT).encode(), headers=headers, timeout=60)
        err = r.json()["error"]
        assert r.status_code == 415 and err["code"] == "unsupported_media_type", r.text
        assert "Content-Type: application/json" in err["message"]
    assert engine.metrics()["requests"] == before
    ok = httpx.post(
        url + "/v1/chat/completions",
        content=json.dumps(CHAT).encode(),
        headers={"content-type": "Application/JSON; charset=utf-8"},
        timeout=60,
    )
    assert ok.status_code == 200


def test_allowed_origin_gets_cors_and_the_preflight_passes_before_the_key_check(model):
    with serving(model, api_key="k", allow_origins=[PAGE + "/"]) as (_, url):
        pre = httpx.options(
            url + "/v1/chat/completions",
            headers={
                "Origin": PAGE,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == PAGE
        key = {"Authorization": "Bearer k"}
        r = httpx.get(url + "/v1/models", headers={"Origin": PAGE, **key})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE
        r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"Origin": PAGE, **key}, timeout=60)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == PAGE
        assert r.json()["usage"]["completion_tokens"] == 2
        assert httpx.post(url + "/v1/chat/completions", json=CHAT, headers=key, timeout=60).status_code == 200
        other = {"Origin": "http://evil.example"}
        pre = httpx.options(url + "/v1/models", headers={**other, "Access-Control-Request-Method": "GET"})
        r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={**other, **key}, timeout=60)
        for refused in (pre, r):
            assert refused.status_code == 403 and "access-control-allow-origin" not in refused.headers
    with serving(model, allow_origins=["*"]) as (_, url):
        r = httpx.post(url + "/v1/chat/completions", json=CHAT, headers={"Origin": "http://a.b"}, timeout=60)
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"


def _param(fn, *args):
    with pytest.raises(ApiError) as e:
        fn(*args)
    assert e.value.status == 400 and e.value.message
    return e.value.param


def test_check_json_names_the_field():
    check_json({"messages": [{"role": "user", "content": [{"type": "text", "text": "naïve 🙂"}]}]})
    assert _param(check_json, {"messages": [{"content": "a\ud800"}]}) == "messages[0].content"
    assert _param(check_json, {"stop": ["x", "\udc00"]}) == "stop[1]"
    assert _param(check_json, {"user": {"\ud800": 1}}) == "user"  # a key
    deep = json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    check_json({"a": deep[0]})  # the body and MAX_DEPTH - 1 levels below it: allowed
    assert _param(check_json, {"ok": 1, "a": deep}) == "a"
    raw = b'{"ok": {"x": [1]}, "deep": {"x": ' + b"[" * 10000 + b"]" * 10000 + b"}}"
    assert _param(decode_json, raw) == "deep"  # past the decoder's own recursion limit
    assert _param(decode_json, b"[" * 10000 + b"]" * 10000) is None
    assert _param(decode_json, b'{"a": ') is None
    assert _param(decode_json, b'"text"') is None
    assert decode_json(b'{"prompt": "\\ud83d\\ude42"}') == {"prompt": "🙂"}  # a surrogate pair is fine

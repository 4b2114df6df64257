"""`vkdecode serve --parallel N` (serve/batch_engine.py) on the tiny model through real HTTP:
concurrent requests decode together in batched steps and each gets the answer it gets alone
(greedy and seeded sampling, stop strings, different lengths); a client that goes away frees its
slot; the bounded queue still refuses with 429."""

from __future__ import annotations

import json
import time

import pytest

httpx = pytest.importorskip("httpx", reason="the test extra installs httpx: pip install '.[test]'")

from tests.helpers.serving import serving
from tests.serve.conftest import QUESTION
from tests.serve.test_app import _post_all
from vkdecode.serve.batch_engine import parallel_widths

BODIES = [
    {"messages": QUESTION, "max_tokens": 9, "temperature": 0},
    {"messages": [{"role": "user", "content": "Hello, world"}], "max_tokens": 4, "temperature": 0},
    {"messages": QUESTION, "max_tokens": 7, "temperature": 0.9, "seed": 5},
    {
        "messages": [{"role": "user", "content": "x"}],
        "max_tokens": 12,
        "temperature": 1.2,
        "top_k": 30,
        "seed": 1,
    },
    {"messages": QUESTION, "max_tokens": 20, "temperature": 0, "stop": [","]},
]


def _answers(got):
    return {i: (s, r["choices"][0]["message"]["content"], r["usage"]["completion_tokens"]) for i, s, r in got}


def test_parallel_widths():
    assert (
        parallel_widths(1) == (1,) and parallel_widths(4) == (1, 2, 4) and parallel_widths(6) == (1, 2, 4, 6)
    )


def test_concurrent_requests_equal_one_at_a_time(model):
    with serving(model) as (_, url):
        alone = _answers(_post_all(url, BODIES))
    with serving(model, parallel=4) as (engine, url):
        together = _answers(_post_all(url, BODIES))
        m = engine.metrics()
    assert together == alone
    assert all(s == 200 for s, _, _ in together.values())
    assert m["queue"]["parallel"] == 4 and m["queue"]["running_requests"] == 0
    assert m["requests"]["completed"] == len(BODIES)
    assert any(n > 0 for w, n in m["batch_steps"].items() if w > 1)  # requests did share steps


def test_disconnect_frees_the_slot_and_the_queue_still_bounds(model):
    body = {"messages": QUESTION, "max_tokens": 1000, "temperature": 0, "stream": True}
    with serving(model, parallel=2) as (engine, url):
        with (
            httpx.Client(timeout=60) as http,
            http.stream("POST", url + "/v1/chat/completions", json=body) as r,
        ):
            lines = r.iter_lines()
            [next(lines) for _ in range(6)]
        t0 = time.monotonic()  # the connection is closed here
        while engine.metrics()["queue"]["running_requests"]:
            assert time.monotonic() - t0 < 20, "the generation went on after the client left"
            time.sleep(0.02)
        m = engine.metrics()
        assert m["requests"]["cancelled"] == 1 and m["last_request"]["cancelled_after_tokens"] < 500
    long = {"messages": QUESTION, "max_tokens": 200, "temperature": 0}
    with serving(model, max_queue=2, parallel=2) as (engine, url):
        got = _post_all(url, [long] * 8)
        status = [s for _, s, _ in got]
        assert len(got) == 8 and set(status) <= {200, 429} and status.count(429) >= 1
        assert status.count(200) >= 4  # two decoding + two waiting at least
        for _, s, r in got:
            if s == 200:
                assert r["usage"]["completion_tokens"] == 200
        assert engine.metrics()["requests"]["rejected_queue_full"] == status.count(429)


def test_a_request_joins_while_another_decodes(model):
    """Continuous batching: a short request sent while a long one streams is answered before the
    long one ends, and the long one's text is what it is alone."""
    long = {"messages": QUESTION, "max_tokens": 150, "temperature": 0, "stream": True}
    short = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3, "temperature": 0}
    with serving(model, parallel=2) as (engine, url):
        with httpx.Client(timeout=120) as http:
            alone = http.post(url + "/v1/chat/completions", json=dict(long, stream=False)).json()
            with http.stream("POST", url + "/v1/chat/completions", json=long) as r:
                lines = r.iter_lines()
                head = [next(lines) for _ in range(6)]
                answer = http.post(url + "/v1/chat/completions", json=short)
                assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3
                assert engine.metrics()["queue"]["running_requests"] == 1  # the long one goes on
                rest = list(lines)
        m = engine.metrics()
    text = "".join(
        json.loads(x[6:])["choices"][0]["delta"].get("content") or ""
        for x in head + rest
        if x.startswith("data: {") and json.loads(x[6:])["choices"]
    )
    assert text == alone["choices"][0]["message"]["content"]
    assert m["batch_steps"][2] > 0

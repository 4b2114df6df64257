"""`vkdecode serve --parallel N` (serve/batch_engine.py) on the tiny model through real HTTP:
concurrent requests decode together in batched steps and each gets the answer it gets alone
(greedy and seeded sampling, stop strings, different lengths); a long prompt joins a chunk at a
time while the others decode; a client that goes away (decoding, or mid-prompt) frees its slot;
the bounded queue still refuses with 429; interleaved chats each reuse their slot's rows."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import pytest

import vkdecode

httpx = pytest.importorskip("httpx", reason="the test extra installs httpx: pip install '.[test]'")

from tests.helpers.serve_case import QUESTION, post_all
from tests.helpers.serving import serving
from vkdecode.serve.batch_engine import TURN_ROWS_MAX, parallel_widths, prompt_rows

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


# about 560 tokens of the tiny tokenizer: nine turns of 64-row chunks on lavapipe
LONG = [{"role": "user", "content": " ".join(f"word{i}" for i in range(80))}]


@pytest.fixture(scope="module")
def model(device, tiny_path):
    """conftest's model with 64-row prompt chunks on every device (a GPU's default widest chunk,
    512 rows, would take LONG in two turns): the turn counts below hold everywhere."""
    with vkdecode.load(tiny_path, device=device, ctx=1024, sampling=True, prefill=(64,)) as m:
        yield m


def _answers(got):
    return {i: (s, r["choices"][0]["message"]["content"], r["usage"]["completion_tokens"]) for i, s, r in got}


def test_parallel_widths():
    assert (
        parallel_widths(1) == (1,) and parallel_widths(4) == (1, 2, 4) and parallel_widths(6) == (1, 2, 4, 6)
    )


def test_a_prompt_turn_is_its_widest_chunk_up_to_512_rows():
    """A joining prompt runs a chunk of its widths per turn, but not the GPU's 2048-row chunks:
    the others' next tokens wait for the turn."""

    def decoder(widths):
        return SimpleNamespace(prefill=SimpleNamespace(widths=widths) if widths else None)

    assert prompt_rows(decoder((2048, 1024, 512, 256, 128, 64, 16, 4))) == TURN_ROWS_MAX == 512
    assert prompt_rows(decoder((64, 32, 16))) == 64
    assert prompt_rows(decoder(())) == 16  # no prompt chunks: 16 decode steps a turn


def test_concurrent_requests_equal_one_at_a_time(model, monkeypatch):
    with serving(model) as (_, url):
        alone = _answers(post_all(url, BODIES))
    # each batched step waits 5 ms first: an H200 answered every request before the next arrived,
    # so no step was shared; paced, the requests overlap on any device
    _record_turns(monkeypatch, step_delay_s=0.005)
    with serving(model, parallel=4) as (engine, url):
        together = _answers(post_all(url, BODIES))
        m = engine.metrics()
    assert together == alone
    assert all(s == 200 for s, _, _ in together.values())
    assert m["queue"]["parallel"] == 4 and m["queue"]["running_requests"] == 0
    assert m["requests"]["completed"] == len(BODIES)
    assert any(n > 0 for w, n in m["batch_steps"].items() if w > 1)  # requests did share steps
    # the engine thread's time: in batched steps, prompt pieces and the tokens' hand-off
    assert set(m["engine_s"]) == {"steps", "prompts", "tokens"} and all(v > 0 for v in m["engine_s"].values())


def test_calibrated_widths_answer_the_same_and_show_in_metrics(model, monkeypatch):
    """batch_pick.calibrate (what Model.batch does on GPUs), then every count of requests at the
    widest width: the same answers, and /metrics names the choice."""
    from vkdecode.executors.batch_pick import calibrate

    with serving(model) as (_, url):
        alone = _answers(post_all(url, BODIES))
    _record_turns(monkeypatch, step_delay_s=0.005)  # the requests overlap on any device (as above)
    with serving(model, parallel=4) as (engine, url):
        before = dict(engine.batch.steps)  # the module's other tests share the model's batch
        try:
            assert sorted(calibrate(engine.batch)) == [1, 2, 3, 4]
            engine.batch.pick = dict.fromkeys(range(1, 5), 4)  # padding rows in every step
            together = _answers(post_all(url, BODIES))
            m = engine.metrics()
        finally:
            engine.batch.pick = None  # the model's batch is shared by this module's other tests
    assert together == alone
    assert m["batch_width_for"] == dict.fromkeys(range(1, 5), 4)
    assert sorted(m["batch_width_ms"]) == [1, 2, 4]  # the times calibrate() chose by
    assert m["batch_steps"][4] > before[4] and m["batch_steps"][2] == before[2]


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
        got = post_all(url, [long] * 8)
        status = [s for _, s, _ in got]
        assert len(got) == 8 and set(status) <= {200, 429} and status.count(429) >= 1
        assert status.count(200) >= 4  # two decoding + two waiting at least
        for _, s, r in got:
            if s == 200:
                assert r["usage"]["completion_tokens"] == 200
        assert engine.metrics()["requests"]["rejected_queue_full"] == status.count(429)


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 0.9, "seed": 5}])
def test_a_request_joins_while_another_decodes(model, sampling, monkeypatch):
    """Continuous batching: a short request sent while a long one streams is answered before the
    long one ends, and the long one's text is what it is alone (it decodes solo before and after:
    it moves into the batch and back out)."""
    _record_turns(monkeypatch, step_delay_s=0.005)  # 150 steps outlast the short one's arrival anywhere
    long = {"messages": QUESTION, "max_tokens": 150, "stream": True, **sampling}
    short = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 3, **sampling}
    with serving(model, parallel=2) as (engine, url):
        with httpx.Client(timeout=120) as http:
            alone = http.post(url + "/v1/chat/completions", json=dict(long, stream=False)).json()
            m0 = engine.metrics()  # the model's batch (and its counts) outlives a server
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
    assert m["batch_steps"][2] > m0["batch_steps"][2]
    assert 0 < m["solo_steps"] - m0["solo_steps"] < 149  # solo before the short one and after it


def test_a_request_alone_decodes_on_the_decoders_step_and_keeps_its_cache(model):
    """Solo: one request on --parallel 2 runs no batched step (its tokens after the first come
    from the decoder's own pipelined step), and its second turn reuses the KV rows of the first,
    as on the one-at-a-time engine."""
    body = {"messages": QUESTION, "max_tokens": 9, "temperature": 0}

    def two_turns(url, http):
        first = http.post(url + "/v1/chat/completions", json=body).json()
        answer = first["choices"][0]["message"]["content"]
        turn2 = QUESTION + [
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Hello, world"},
        ]
        return first, http.post(url + "/v1/chat/completions", json=dict(body, messages=turn2)).json()

    with serving(model) as (_, url), httpx.Client(timeout=120) as http:
        want = two_turns(url, http)
    with serving(model, parallel=2) as (engine, url), httpx.Client(timeout=120) as http:
        m0 = engine.metrics()  # the model's batch (and its counts) outlives a server
        got = two_turns(url, http)
        m = engine.metrics()
    assert [r["choices"][0]["message"]["content"] for r in got] == [
        r["choices"][0]["message"]["content"] for r in want
    ]
    assert m["batch_steps"] == m0["batch_steps"] and m["solo_steps"] - m0["solo_steps"] == 2 * 8
    cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in (want[1], got[1])]
    assert want[0]["usage"]["prompt_tokens"] <= cached[0] == cached[1] < got[1]["usage"]["prompt_tokens"]


def _streamed_text(lines) -> str:
    return "".join(
        json.loads(x[6:])["choices"][0]["delta"].get("content") or ""
        for x in lines
        if x.startswith("data: {") and json.loads(x[6:])["choices"]
    )


def _record_turns(monkeypatch, delay_s: float = 0.0, step_delay_s: float = 0.0) -> list[tuple]:
    """The engine's calls of BatchGenerator.prefill and next, in order: ("prefill", the joining
    request's seq, whether it joined) and ("step", the seqs that got a token). delay_s: each
    prefill turn waits that long first (a slow prompt, so a test can act in the middle of one);
    step_delay_s: each step does (so requests overlap however fast the device is)."""
    from vkdecode.batch import BatchGenerator

    events, prefill, step = [], BatchGenerator.prefill, BatchGenerator.next

    def logged_prefill(self, rows=1):
        time.sleep(delay_s)
        seq = self.seqs[self.joining].index
        r = prefill(self, rows)
        events.append(("prefill", seq, r is not None))
        return r

    def logged_step(self):
        time.sleep(step_delay_s)
        rs = step(self)
        events.append(("step", {r.index for r in rs}))
        return rs

    monkeypatch.setattr(BatchGenerator, "prefill", logged_prefill)
    monkeypatch.setattr(BatchGenerator, "next", logged_step)
    return events


def test_a_long_prompt_joins_a_chunk_at_a_time_while_another_decodes(model, monkeypatch):
    """The running request (seq 0) gets a token after every turn of the long prompt's (seq 1)
    chunks, not only once that prompt has run; both answers are the ones they get alone."""
    running = {"messages": QUESTION, "max_tokens": 150, "temperature": 0, "stream": True}
    # cache_prompt false: the whole prompt runs, whatever an earlier test left in the KV cache
    joining = {"messages": LONG, "max_tokens": 6, "temperature": 0, "cache_prompt": False}
    events = _record_turns(monkeypatch)
    with serving(model) as (_, url), httpx.Client(timeout=120) as http:
        alone = [
            http.post(url + "/v1/chat/completions", json=dict(b, stream=False)).json()
            for b in (running, joining)
        ]
    assert 400 < alone[1]["usage"]["prompt_tokens"] < 1024 - 6, alone[1]
    with (
        serving(model, parallel=2) as (_, url),
        httpx.Client(timeout=120) as http,
        http.stream("POST", url + "/v1/chat/completions", json=running) as r,
    ):
        lines = r.iter_lines()
        head = [next(lines) for _ in range(4)]
        joined = http.post(url + "/v1/chat/completions", json=joining).json()
        rest = list(lines)
    assert _streamed_text(head + rest) == alone[0]["choices"][0]["message"]["content"]
    assert joined["choices"][0]["message"]["content"] == alone[1]["choices"][0]["message"]["content"]
    turns = [i for i, e in enumerate(events) if e[:2] == ("prefill", 1)]
    assert len(turns) >= 5 and events[turns[-1]][2] and not any(events[i][2] for i in turns[:-1])
    steps = [e for e in events[turns[0] : turns[-1]] if e[0] == "step" and 0 in e[1]]
    assert len(steps) == len(turns) - 1  # one token of seq 0 after each turn but the last


def test_a_client_gone_mid_prompt_frees_the_slot(model, monkeypatch):
    """A stream whose client leaves while its long prompt runs (turns slowed to 0.2 s): the prompt
    stops there, never joins, and its slot is free for the next request."""
    events = _record_turns(monkeypatch, delay_s=0.2)
    body = {"messages": LONG, "max_tokens": 6, "temperature": 0, "stream": True, "cache_prompt": False}
    with serving(model, parallel=2) as (engine, url), httpx.Client(timeout=120) as http:
        with http.stream("POST", url + "/v1/chat/completions", json=body) as r:
            next(r.iter_lines())  # the role chunk: the request is in
            # ~1 s alone; over 20 s once on lavapipe beside another suite run (-n 2)
            t0 = time.monotonic()
            while ("prefill", 0, False) not in events:
                assert time.monotonic() - t0 < 60, "the prompt did not start"
                time.sleep(0.01)
        t0 = time.monotonic()
        while engine.metrics()["requests"]["cancelled"] < 1:
            assert time.monotonic() - t0 < 20, "the prompt went on after the client left"
            time.sleep(0.02)
        assert ("prefill", 0, True) not in events
        assert engine.joining is None and engine.batch.free == [0, 1] and not engine.live
        assert engine.metrics()["queue"]["running_requests"] == 0
        short = {"messages": QUESTION, "max_tokens": 3, "temperature": 0}
        answer = http.post(url + "/v1/chat/completions", json=short)
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 3


def test_a_failed_prompt_chunk_or_step_ends_only_its_requests(model, monkeypatch):
    """A prompt chunk that raises ends its request with a 500 and frees its slot; a request alone
    whose decode (solo, on the decoder's step) raises ends with a 500; a batched step that raises
    ends the requests in it and joining it with a 500 (no rows copied back from the failed slots);
    each time the server answers the next request as it does alone."""
    from vkdecode.executors.prefill import Prefill

    def boom(*args, **kwargs):
        raise RuntimeError("device lost")

    long = {"messages": LONG, "max_tokens": 3, "temperature": 0, "cache_prompt": False}
    short = {"messages": QUESTION, "max_tokens": 4, "temperature": 0}
    with serving(model) as (_, url), httpx.Client(timeout=120) as http:
        alone = http.post(url + "/v1/chat/completions", json=short).json()["choices"][0]["message"]
    with serving(model, parallel=2) as (engine, url), httpx.Client(timeout=120) as http:
        with monkeypatch.context() as m:
            m.setattr(Prefill, "run_chunk", boom)
            r = http.post(url + "/v1/chat/completions", json=long)
        assert r.status_code == 500 and r.json()["error"]["code"] == "generation_failed"
        assert engine.batch.free == [0, 1] and engine.batch.joining is None
        with monkeypatch.context() as m:
            m.setattr(model.decoder, "decode", boom)
            r = http.post(url + "/v1/chat/completions", json=short)
        assert r.status_code == 500 and engine.batch.kv is None and len(model.kv) == 0
        assert engine.batch.solo.slot is None and engine.batch.free == [0, 1]
        with monkeypatch.context() as m:
            for ex in engine.batch.runners.values():
                m.setattr(ex, "step", boom)
            # the second arrives while the first decodes (solo): the first goes into the batch
            got = post_all(url, [dict(short, max_tokens=200), short])
        assert [s for _, s, _ in got] == [500, 500] and engine.batch.kv is None and len(model.kv) == 0
        again = http.post(url + "/v1/chat/completions", json=short).json()
        m = engine.metrics()
    assert again["choices"][0]["message"] == alone
    assert m["requests"]["failed"] == 4 and m["queue"]["running_requests"] == 0


def test_two_interleaved_chats_each_reuse_their_slot(model):
    """Clients A and B chat two turns each, their turns concurrent (A1 with B1, then A2 with B2), and
    an unrelated request in between: each second turn reports cached_tokens covering its first turn,
    as many as right after it on the one-at-a-time engine (its slot kept its rows: --parallel 3
    leaves the unrelated one an empty slot), and answers as with cache_prompt false."""
    chats = [QUESTION, [{"role": "user", "content": "Hello, world"}]]
    first = [{"messages": c, "max_tokens": 8, "temperature": 0} for c in chats]
    unrelated = {"messages": [{"role": "user", "content": "x y z"}], "max_tokens": 5, "temperature": 0}
    with serving(model, parallel=3) as (engine, url), httpx.Client(timeout=120) as http:
        turn1 = _by_client(post_all(url, first))
        second = [
            dict(
                first[i],
                messages=chats[i] + [{"role": "assistant", "content": _content(turn1[i])}, chats[1 - i][0]],
            )
            for i in (0, 1)
        ]
        assert http.post(url + "/v1/chat/completions", json=unrelated).status_code == 200
        assert len(engine.batch.cache.ids) == 3  # the unrelated request took the empty slot
        turn2 = _by_client(post_all(url, second))
        fresh = _by_client(post_all(url, [dict(b, cache_prompt=False) for b in second]))
    with serving(model) as (_, url), httpx.Client(timeout=120) as http:
        back_to_back = []
        for i in (0, 1):
            http.post(url + "/v1/chat/completions", json=first[i])
            r = http.post(url + "/v1/chat/completions", json=second[i]).json()
            back_to_back.append(r["usage"]["prompt_tokens_details"]["cached_tokens"])
    for i in (0, 1):
        assert turn2[i]["usage"]["prompt_tokens_details"]["cached_tokens"] == back_to_back[i]
        cached = turn2[i]["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert turn1[i]["usage"]["prompt_tokens"] <= cached < turn2[i]["usage"]["prompt_tokens"]
        assert fresh[i]["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert _content(turn2[i]) == _content(fresh[i])


def _by_client(got) -> dict:
    assert sorted((i, s) for i, s, _ in got) == [(0, 200), (1, 200)]
    return {i: r for i, _, r in got}


def _content(r) -> str:
    return r["choices"][0]["message"]["content"]


def test_qwen35_requests_share_steps_and_a_second_turn_resumes(device, tmp_path_factory, monkeypatch):
    """Qwen3.5 (linear-attention layers: a recurrent state copy a slot) on --parallel 4: concurrent
    requests answer as they do one at a time, in shared batched steps; a chat's second turn resumes
    from its first prompt's state checkpoint (cached_tokens: that whole prompt) on either engine and
    answers as from position 0. Its ~30 new tokens wash a wrong state out of the tiny model's
    answer: that the restore itself counts, tests/test_prompt_cache.py shows with 4 new tokens."""
    from tests.helpers.make_models import models_dir, tiny_hf_model

    path = tiny_hf_model("qwen35", models_dir(tmp_path_factory))
    bodies = [dict(b, max_tokens=min(b["max_tokens"], 8)) for b in BODIES[:4]]
    turn1 = {"messages": QUESTION, "max_tokens": 6, "temperature": 0}

    def turn2(first):
        answer = first["choices"][0]["message"]["content"]
        messages = QUESTION + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Hello"}]
        return dict(turn1, messages=messages)

    with vkdecode.load(str(path), device=device, ctx=256, sampling=True) as m:
        with serving(m) as (_, url), httpx.Client(timeout=120) as http:
            alone = _answers(post_all(url, bodies))
            first = http.post(url + "/v1/chat/completions", json=turn1).json()
            resumed1 = http.post(url + "/v1/chat/completions", json=turn2(first)).json()
            fresh = http.post(
                url + "/v1/chat/completions", json=dict(turn2(first), cache_prompt=False)
            ).json()
        _record_turns(monkeypatch, step_delay_s=0.005)  # the requests overlap on any device
        with serving(m, parallel=4) as (engine, url), httpx.Client(timeout=120) as http:
            together = _answers(post_all(url, bodies))
            m0 = engine.metrics()
            first2 = http.post(url + "/v1/chat/completions", json=turn1).json()
            resumed = http.post(url + "/v1/chat/completions", json=turn2(first2)).json()
    assert together == alone
    assert any(n > 0 for w, n in m0["batch_steps"].items() if w > 1)  # requests did share steps
    assert first2["choices"] == first["choices"]
    for r in (resumed1, resumed):  # one at a time, then batched
        assert r["choices"][0]["message"] == fresh["choices"][0]["message"]
        cached = r["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == first["usage"]["prompt_tokens"] < r["usage"]["prompt_tokens"]
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0

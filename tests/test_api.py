"""The Python API: vkdecode.load -> generate / stream_generate / close / with, on a tiny model."""

from __future__ import annotations

import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.errors import ContextError, ModelError, UsageError
from vkdecode.generate import GenerationResponse


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return str(tiny_hf_model("qwen2", models_dir(tmp_path_factory)))


def test_generate_and_stream_agree(device, tiny_gguf):
    with vkdecode.load(tiny_gguf, device=device, ctx=64) as model:
        rs = list(model.stream_generate("Hello, world", max_tokens=5))
        text = model.generate("Hello, world", max_tokens=5)
        n_items = len(model.executor.items)
    assert all(isinstance(r, GenerationResponse) for r in rs)
    assert len(rs) <= 5 and rs[-1].finish_reason in ("length", "stop")
    assert all(r.finish_reason is None and r.stats is None for r in rs[:-1])
    assert text == "".join(r.text for r in rs)
    s = rs[-1].stats
    assert s["mode"] == "fused" and s["generated_tokens"] == len(rs)
    h, e = s["host_calls_per_token"], s["executed_per_token"]
    assert h["descriptor_writes"] == 0 and h["submits"] == 1 and "dispatches" not in h
    assert e["dispatches"] == n_items > 0  # what `vkdecode stats` calls dispatches, never 0
    if s["decode_tok_s"] > 0:
        assert s["gpu_us_per_token"] <= s["wall_us_per_token"] == pytest.approx(1e6 / s["decode_tok_s"])


def test_modes_give_the_same_greedy_tokens(device, tiny_gguf):
    got = {}
    for mode in ("fused", "replay-nofuse", "unfused"):
        with vkdecode.load(tiny_gguf, device=device, mode=mode, ctx=64) as model:
            assert model.mode == mode
            got[mode] = [
                r.token for r in model.stream_generate(chat="What is the capital of France?", max_tokens=6)
            ]
    assert got["fused"] == got["replay-nofuse"] == got["unfused"]


def test_kv_dtype_option(device, tiny_gguf):
    """f16 caches by default, f32 on request; both decode (tokens may differ: f16 rounds k, v)."""
    for kv, nbytes in (("f16", 2), ("f32", 4)):
        kw = {} if kv == "f16" else {"kv_dtype": kv}
        with vkdecode.load(tiny_gguf, device=device, ctx=64, **kw) as model:
            caches = [v for v in model.loaded.program.values.values() if v.kind == "state"]
            assert caches and {v.dtype for v in caches} == {kv}
            assert model.executor.plan.slices[(caches[0].name, "data")].size == caches[0].numel * nbytes
            assert 1 <= len(list(model.stream_generate("Hello", max_tokens=3))) <= 3
    with pytest.raises(ModelError, match="KV cache dtype"):
        vkdecode.load(tiny_gguf, device=device, kv_dtype="bf16")


def test_hf_directory_and_prompt_ids(device, tiny_dir):
    with vkdecode.load(tiny_dir, device=device, ctx=32) as model:
        ids = model.encode_prompt("Hello")
        assert ids and all(isinstance(i, int) for i in ids)
        chat_ids = model.encode_prompt(chat="Hello")
        assert len(chat_ids) > len(ids)  # the template wraps the message
        a = [r.token for r in model.stream_generate(prompt_ids=ids, max_tokens=3)]
        b = [r.token for r in model.stream_generate("Hello", max_tokens=3)]
    assert a == b


def test_close_releases_and_is_idempotent(tiny_gguf):
    model = vkdecode.load(tiny_gguf, ctx=32)  # owns its device
    # generate() is the concatenated text of the tokens stream_generate yields
    toks = [r for r in model.stream_generate("Hi", max_tokens=2)]
    assert 1 <= len(toks) <= 2 and model.generate("Hi", max_tokens=2) == "".join(r.text for r in toks)
    assert not model.device.validation_errors
    model.close()
    assert model.executor is None and model.device is None
    model.close()  # harmless
    with vkdecode.load(tiny_gguf, ctx=32) as m2:
        m2.generate("Hi", max_tokens=1)
    assert m2.executor is None
    m2.close()


def test_shared_device_stays_open(device, tiny_gguf):
    with vkdecode.load(tiny_gguf, device=device, ctx=32) as model:
        model.generate("Hi", max_tokens=1)
    assert model.executor is None
    buf = device.buffer(64)  # the caller's device still works
    buf.close()


def test_errors(device, tiny_gguf, tmp_path):
    with pytest.raises(ModelError, match="no such file"):
        vkdecode.load(tmp_path / "missing.gguf", device=device)
    with vkdecode.load(tiny_gguf, device=device, ctx=8) as model:
        with pytest.raises(ContextError, match="--ctx"):
            list(model.stream_generate("the quick brown fox jumps over the lazy dog " * 4, max_tokens=2))
        vocab = model.loaded.args.vocab_size
        with pytest.raises(UsageError, match=f"token id {vocab} is outside"):  # never an OOB embedding row
            list(model.stream_generate(prompt_ids=[1, vocab], max_tokens=2))


def test_chat_needs_a_chat_template(device, tiny_dir, tmp_path):
    """--chat / chat= on a model without a chat template is an error naming the problem (it used to
    fall back to ChatML silently); a raw prompt still runs."""
    import json
    import shutil

    d = tmp_path / "no-template"
    shutil.copytree(tiny_dir, d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    with vkdecode.load(d, device=device, ctx=16) as model:
        with pytest.raises(ModelError, match="no chat template"):
            model.generate(chat="Hi", max_tokens=2)
        assert len(list(model.stream_generate("Hi", max_tokens=2))) >= 1


def test_a_chat_splits_its_reasoning_and_the_text_stays_raw(device, tiny_gguf, monkeypatch):
    """The tiny Llama given a template that opens a <think> block (its random text never closes
    it): chats split by default, raw prompts only when asked, and text is the raw text always."""
    from tests.helpers.make_models import THINK_CHATML

    with vkdecode.load(tiny_gguf, device=device, ctx=64) as model:
        assert model.reasoning_format is None  # ChatML, no <think> in the vocabulary
        plain = model.generate(chat="Hi", max_tokens=6)
        assert (plain.reasoning, plain.content) == ("", plain)
        monkeypatch.setattr(model.tokenizer, "chat_template", THINK_CHATML)
        assert model.reasoning_format == "think"
        rs = list(model.stream_generate(chat="Hi", max_tokens=6))
        text = model.generate(chat="Hi", max_tokens=6)
        raw = model.generate(chat="Hi", max_tokens=6, reasoning_format="none")
        assert "".join(r.text for r in rs) == text == raw and text.strip() and "</think>" not in text
        assert (text.reasoning, text.content) == (text.lstrip(), "")
        assert "".join(r.reasoning for r in rs) == text.lstrip() and (raw.reasoning, raw.content) == ("", raw)
        # a raw prompt ending in the tag: no split unless asked (it continues text, opens no turn)
        prompt = model.generate("Hi<think>\n", max_tokens=6)
        assert (prompt.reasoning, prompt.content) == ("", prompt)
        asked = model.generate("Hi<think>\n", max_tokens=6, reasoning_format="think")
        assert (asked.reasoning, asked.content) == (asked.lstrip(), "")
        with pytest.raises(UsageError, match="reasoning format 'deepseek'"):
            model.stream_generate(chat="Hi", reasoning_format="deepseek")

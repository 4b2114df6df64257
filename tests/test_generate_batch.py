"""vkdecode/batch.py through the Python API: Model.generate_batch / stream_generate_batch give each
prompt the text Model.generate gives it alone, whatever the batch around it, on a tiny model."""

from __future__ import annotations

import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.batch import BatchResponse
from vkdecode.errors import UsageError
from vkdecode.lowering.caps import KernelCaps

PROMPTS = ["Hello, world", "The capital of France", "x", "def f(x):\n    return x", "naïve café"]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


@pytest.mark.parametrize("mode", ["fused", "unfused"])
def test_generate_batch_equals_generate(device, tiny_gguf, mode):
    limits = [7, 3, 9, 1, 5]
    with vkdecode.load(tiny_gguf, device=device, ctx=64, mode=mode) as model:
        want = [model.generate(p, max_tokens=n) for p, n in zip(PROMPTS, limits)]
        # 5 prompts over widths up to 2: three wait for a slot, join as others finish
        got = model.generate_batch(PROMPTS, max_tokens=limits, widths=(1, 2))
        stats = model.batch((1, 2)).stats()
    assert got == want
    assert stats[2]["steps"] > 0


def test_stream_generate_batch_responses(device, tiny_gguf):
    with vkdecode.load(tiny_gguf, device=device, ctx=64, sampling=True) as model:
        rs = list(
            model.stream_generate_batch(PROMPTS[:3], max_tokens=4, temp=[0.0, 0.8, 1.2], seed=[0, 1, 2])
        )
        alone = [
            model.generate(p, max_tokens=4, temp=t, seed=s)
            for p, t, s in zip(PROMPTS[:3], (0.0, 0.8, 1.2), (0, 1, 2))
        ]
        with pytest.raises(UsageError, match="2 values for 3 prompts"):
            model.generate_batch(PROMPTS[:3], temp=[0.1, 0.2])
        with pytest.raises(UsageError, match="a list of prompts"):
            model.generate_batch("Hello")
    assert all(isinstance(r, BatchResponse) for r in rs)
    for i in range(3):
        mine = [r for r in rs if r.index == i]
        assert [r.finish_reason for r in mine[:-1]] == [None] * (len(mine) - 1)
        assert mine[-1].finish_reason in ("stop", "length")
        assert "".join(r.text for r in mine) == alone[i]


def test_batch_generator_runs_a_prompt_a_piece_at_a_time(device, tiny_gguf):
    """BatchGenerator.start / prefill: a prompt joins a piece per prefill() while next() steps the
    sequence already in; both texts are generate()'s; remove() mid-prompt frees the slot."""
    from vkdecode.batch import BatchGenerator

    short, long = PROMPTS[1], " ".join(PROMPTS * 2)
    # f32 chunk kernels: on a GPU a 16-row piece of the join would take the tensor cores (f16
    # inputs) where generate()'s prompt chunk does not, and this random tiny model's greedy choice
    # flipped at a near-tie on the H200; the pieces' bookkeeping is what is under test here
    caps = KernelCaps.from_info(device.info, matmul_coop=-1)
    with vkdecode.load(tiny_gguf, device=device, ctx=128, caps=caps) as model:
        want = [model.generate(short, max_tokens=12), model.generate(long, max_tokens=3)]
        ids = [model.encode_prompt(prompt=p) for p in (short, long)]
        gen = BatchGenerator(model.batch((1, 2)), model.tokenizer, model.kv)
        texts, steps = [gen.insert(0, ids[0], 12).text, ""], 0
        gen.start(1, ids[1], 3)
        while (r := gen.prefill()) is None:
            texts[0] += "".join(x.text for x in gen.next())
            steps += 1
        texts[1] += r.text
        while gen.seqs:
            for x in gen.next():
                texts[x.index] += x.text
        gen.start(2, ids[1], 3)
        assert gen.prefill() is None and gen.free == 1
        gen.remove(2)
        assert gen.free == 2 and gen.joining is None and not gen.seqs
    # steps between pieces: lavapipe runs this prompt as chunks of exact widths and decode steps
    # (several pieces), a GPU as fewer padded chunks (two pieces on the H200: one step between)
    assert texts == want and steps >= 1


def test_generate_batch_splits_each_chats_reasoning(device, tiny_gguf, monkeypatch):
    """A batch of chats with a template that opens a <think> block: each sequence split by its own
    parser, as generate() splits it alone; raw prompts and reasoning_format="none" stay unsplit."""
    from tests.helpers.make_models import THINK_CHATML

    chats = PROMPTS[:3]
    with vkdecode.load(tiny_gguf, device=device, ctx=64) as model:
        monkeypatch.setattr(model.tokenizer, "chat_template", THINK_CHATML)
        alone = [model.generate(chat=c, max_tokens=5) for c in chats]
        got = model.generate_batch(chats=chats, max_tokens=5, widths=(1, 2))
        raw = model.generate_batch(chats=chats, max_tokens=5, widths=(1, 2), reasoning_format="none")
        plain = model.generate_batch(PROMPTS[:2], max_tokens=5, widths=(1, 2))
    assert got == alone == raw and all(t.strip() for t in got)
    assert [(t.reasoning, t.content) for t in got] == [(a.reasoning, a.content) for a in alone]
    assert all((t.reasoning, t.content) == (t.lstrip(), "") for t in got)  # the block never closes
    assert all((t.reasoning, t.content) == ("", t) for t in raw + plain)

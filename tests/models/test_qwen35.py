"""Qwen3.5 (models/qwen35.py): its config read and refused, its step against transformers (the
reference, then every mode of the GPU path against the reference), prompt chunks against the token
path, the user's path against transformers' own greedy generation, and the paths refused for a
recurrent state."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import QWEN35, SMALL, hf_logits, tiny_hf_model
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.errors import ModelError, UsageError
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.models.config import ModelArgs
from vkdecode.models.loader import load_model
from vkdecode.models.qwen35 import FULL, LINEAR, rotary_order
from vkdecode.reference import Reference

CTX = 64


def config(**kw) -> dict:
    cfg = {**SMALL, **QWEN35, "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text", **kw}
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.fixture(scope="module")
def tiny(models_dir):
    path = tiny_hf_model("qwen35", models_dir)
    return path, load_model(str(path), ctx=CTX)


def test_config_read():
    a = ModelArgs.from_hf_config(config())
    assert (a.arch, a.rotary_dim, a.linear_attn, a.qk_norm) == ("qwen3_5", 8, (2, 4, 16, 8, 4), True)
    assert a.layer_types == (LINEAR, LINEAR, FULL, LINEAR)
    # no layer_types: transformers' full_attention_interval (default 4)
    a = ModelArgs.from_hf_config(config(layer_types=None, num_hidden_layers=8, full_attention_interval=2))
    assert a.layer_types == (LINEAR, FULL) * 4
    # mrope sections change nothing for text (every section's position is the same)
    rope = {**QWEN35["rope_parameters"], "mrope_section": [2, 1, 1], "mrope_interleaved": True}
    assert ModelArgs.from_hf_config(config(rope_parameters=rope)).rotary_dim == 8


@pytest.mark.parametrize(
    "kw,msg",
    [
        ({"attention_bias": True}, "attention_bias"),
        ({"layer_types": ["sliding_attention"] * 4}, "layer_types"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}}, "yarn|rope"),
        ({"rope_parameters": {"rope_theta": 1e4, "partial_rotary_factor": 0.1}}, "rotary"),  # 1 dim
        ({"linear_num_value_heads": 3}, "linear attention"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_config_refused(kw, msg):
    with pytest.raises(ModelError, match=msg):
        ModelArgs.from_hf_config(config(**kw))


def test_gguf_refused():
    from vkdecode.models.qwen35 import ARCHITECTURE

    with pytest.raises(ModelError, match="GGUF"):
        ARCHITECTURE.gguf_fields(lambda k, d=None: d, 4, 64, 4)


def test_rotary_order():
    """HF's pair (i, i + r / 2) lands at the rope op's (i, i + d / 2); every dim once."""
    order = rotary_order(16, 8)
    assert sorted(order) == list(range(16))
    assert [(order[i], order[i + 8]) for i in range(4)] == [(i, i + 4) for i in range(4)]
    assert set(order[4:8]) | set(order[12:]) == set(range(8, 16))


def test_reference_matches_transformers(tiny):
    path, m = tiny
    toks = [5, 9, 17, 33, 2, 70, 11, 4, 200, 8]
    want = hf_logits(path, toks)
    ref = Reference(m.program, m.weights, dtype=np.float64)
    for p, t in enumerate(toks):
        got = ref.step(t, p)["logits"]
        # transformers' delta rule runs in float32 whatever the model's dtype
        assert np.abs(got - want[p]).max() <= 2e-4 * np.abs(want[p]).max(), f"position {p}"


@pytest.mark.parametrize("mode", ["unfused", "replay-nofuse", "fused"])
def test_modes_match_the_reference(device, tiny, mode):
    _, m = tiny
    with make_executor(mode, device, m.program, m.weights) as ex:
        toks, _ = greedy_against_reference(ex, Reference(m.program, m.weights), 14)
    assert len(set(toks)) > 3  # not a constant run


def test_user_path_equals_transformers_generate(device, tiny):
    """vkdecode.load + generate (greedy) against transformers' generate on the same ids; a second
    prompt sharing the first's start (prompt_cache on) restarts at position 0 and still agrees."""
    import torch
    import transformers

    import vkdecode

    path, _ = tiny
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def hf_greedy(ids, n):
        with torch.no_grad():
            out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, top_p=None, top_k=None)
        return out[0, len(ids) :].tolist()

    first, second = [5, 9, 17, 33, 2, 70, 11], [5, 9, 17, 33, 101, 6]
    with vkdecode.load(str(path), device=device, ctx=CTX) as model:
        for ids in (first, second):
            got = [r.token for r in model.stream_generate(prompt_ids=ids, max_tokens=10, prompt_cache=True)]
            want = hf_greedy(ids, 10)
            n = next((i for i, t in enumerate(want) if t == 2), len(want))  # up to EOS (2)
            assert got[: n + 1] == want[: n + 1], (ids, got, want)
        assert not model.kv.rewindable
        from vkdecode.cli.serve import model_parallel

        assert model_parallel(model) == 1  # serve: one request at a time (no batched steps)


@pytest.mark.parametrize("mode", ["unfused", "fused"])
def test_prompt_chunks_equal_the_token_path(device, tiny, mode):
    """Prompt chunks run the linear layers' rows in order (the states carried from row to row and
    chunk to chunk), whole chunks only (a padded row would stay in the state): the states, the KV
    rows, the logits and the greedy tokens after the prompt are the token path's."""
    _, m = tiny
    toks = [int(t) for t in np.random.default_rng(4).integers(3, 290, 30)]
    ref = Reference(m.program, m.weights)
    for p, t in enumerate(toks):
        r = ref.step(t, p)
    # a GPU's plan (forced): it would pad the last chunk, 29 tokens as 16 + 13 in 16 rows
    caps = KernelCaps.from_info(device.info, prefill_chunk_rows=64)
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=caps)) as dec:
        dec.set_prefill((16, 8, 4))
        assert dec.prefill.plan(29, 0) == [(16, 16), (8, 8), (4, 4)]  # whole: 1 token left to the steps
        nxt = dec.run_prompt(toks, 0)
        assert [c.width for c in dec.prefill.chunks] == [16, 8, 4]
        ex = dec.executor
        for name, want in ref.state.items():
            v = ex.program.values[name]
            dt = "float16" if v.dtype == "f16" else "float32"
            got = (
                ex.plan.slices[(name, "data")].read_array(dt, v.numel).astype(np.float32).reshape(want.shape)
            )
            rows = slice(0, len(toks)) if want.ndim == 2 else slice(None)  # KV caches: the prompt's rows
            err = np.abs(got[rows] - want[rows]).max() / np.abs(want[rows]).max()
            assert err <= (2e-3 if v.dtype == "f16" else 1e-4), f"{name}: rel err {err:.2e}"
        lg = ex.read_logits()
        assert np.abs(lg - r["logits"]).max() <= 1e-4 * np.abs(r["logits"]).max()
        assert nxt == int(r["next_token"][0])
        after = [nxt] + list(ex.decode(nxt, len(toks), 8))
    with Decoder(make_executor(mode, device, m.program, m.weights)) as dec:
        nxt = dec.run_prompt(toks, 0)  # no chunks: the token path
        assert [nxt] + list(dec.executor.decode(nxt, len(toks), 8)) == after


def test_recurrent_paths_refused(device, tiny):
    _, m = tiny
    with Decoder(make_executor("fused", device, m.program, m.weights)) as dec:
        with pytest.raises(UsageError, match="speculative"):
            dec.set_speculative(4)
        from vkdecode.executors.batch import BatchDecode

        with pytest.raises(UsageError, match="batched decode"):
            BatchDecode(dec)


def test_multimodal_checkpoint_runs_its_text_model(device, models_dir):
    """A Qwen3_5ForConditionalGeneration directory (how Qwen3.5 ships): its text_config is read,
    its text model's tensors found under model.language_model., its vision tower left alone; greedy
    tokens equal transformers' generate on the same text ids."""
    import torch
    import transformers

    import vkdecode
    from tests.helpers.make_models import write_tiny_tokenizer

    path = models_dir / "hf-qwen35-multimodal"
    if not (path / "config.json").exists():
        text = {**SMALL, **QWEN35, "tie_word_embeddings": False}
        vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2}
        cfg = transformers.Qwen3_5Config(text_config=text, vision_config={**vision, "out_hidden_size": 64})
        torch.manual_seed(1)
        model = transformers.Qwen3_5ForConditionalGeneration(cfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p)) if "norm" in name else p.normal_(0.0, 0.3)
        model.save_pretrained(path)
        write_tiny_tokenizer(path)
    a = ModelArgs.from_hf_config(str(path))
    assert (a.arch, a.linear_attn, a.tie_embeddings) == ("qwen3_5", (2, 4, 16, 8, 4), False)
    hf = transformers.Qwen3_5ForConditionalGeneration.from_pretrained(path, dtype=torch.float32).eval()
    ids = [5, 9, 17, 33, 2, 70, 11, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52]
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False, top_p=None, top_k=None)
    want = out[0, len(ids) :].tolist()
    with vkdecode.load(str(path), device=device, ctx=CTX) as model:
        got = [r.token for r in model.stream_generate(prompt_ids=ids, max_tokens=8)]
    n = next((i for i, t in enumerate(want) if t == 2), len(want))  # up to EOS (2)
    assert got[: n + 1] == want[: n + 1]

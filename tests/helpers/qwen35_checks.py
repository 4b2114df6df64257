"""The checks Qwen3.5's text models share (tests/models/test_qwen35.py, dense, and
test_qwen35_moe.py): prompt chunks against the token path, the user's path against transformers'
greedy generate (alone and batched), speculative decode against plain decode, a tiny multimodal
checkpoint."""

from __future__ import annotations

import numpy as np

from tests.helpers.make_models import write_tiny_tokenizer
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.reference import Reference


def hf_greedy(hf, ids: list[int], n: int) -> list[int]:
    """transformers' greedy generate of n tokens after ids."""
    import torch

    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, top_p=None, top_k=None)
    return out[0, len(ids) :].tolist()


def up_to_eos(got: list[int], want: list[int], eos: int = 2) -> None:
    n = next((i for i, t in enumerate(want) if t == eos), len(want))
    assert got[: n + 1] == want[: n + 1], (got, want)


def check_user_path(device, path, ctx: int) -> None:
    """vkdecode.load + generate (greedy) against transformers' generate on the same ids; a second
    prompt sharing the first's start (prompt_cache on) restarts at position 0 and still agrees;
    generate_batch (prompt_cache on: nothing is reused) gives each prompt its tokens alone, and
    serve may batch requests."""
    import torch
    import transformers

    import vkdecode
    from vkdecode.cli.serve import model_parallel

    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = ([5, 9, 17, 33, 2, 70, 11], [5, 9, 17, 33, 101, 6])
    with vkdecode.load(str(path), device=device, ctx=ctx) as model:
        alone = []
        for ids in prompts:
            got = [r.token for r in model.stream_generate(prompt_ids=ids, max_tokens=10, prompt_cache=True)]
            up_to_eos(got, hf_greedy(hf, ids, 10))
            alone.append(got)
        assert not model.kv.rewindable
        rs = list(model.stream_generate_batch(prompt_ids=list(prompts), max_tokens=10, prompt_cache=True))
        assert [[r.token for r in rs if r.index == i] for i in range(2)] == alone
        assert model_parallel(model) > 1


def check_prompt_chunks(device, m, mode: str) -> None:
    """Prompt chunks run the linear layers' rows in order (the states carried from row to row and
    chunk to chunk), a padded chunk its prompt rows only (its step's STEP_LIVE: a padding row would
    stay in the state): the states, the KV rows, the logits and the greedy tokens after the prompt
    are the token path's."""
    toks = [int(t) for t in np.random.default_rng(4).integers(3, 290, 30)]
    ref = Reference(m.program, m.weights)
    for p, t in enumerate(toks):
        r = ref.step(t, p)
    # a GPU's plan (forced): the last chunk padded, 29 tokens as 16 + 13 in 16 rows
    caps = KernelCaps.from_info(device.info, prefill_chunk_rows=64)
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=caps)) as dec:
        dec.set_prefill((16, 8, 4))
        assert dec.prefill.plan(29, 0) == [(16, 16), (16, 13)]
        nxt = dec.run_prompt(toks, 0)
        assert [(c.width, c.tokens) for c in dec.prefill.chunks] == [(16, 16), (16, 13)]
        ex = dec.executor
        for name, want in ref.state.items():
            v = ex.program.values[name]
            dt = "float16" if v.dtype == "f16" else "float32"
            got = (
                ex.plan.slices[(name, "data")].read_array(dt, v.numel).astype(np.float32).reshape(want.shape)
            )
            rows = slice(0, len(toks)) if want.ndim == 2 else slice(None)  # KV caches: the prompt's rows
            err = np.abs(got[rows] - want[rows]).max() / np.abs(want[rows]).max()
            # f32 states: 1e-4 on lavapipe, up to 2.9e-4 on an H100 (its fused multiply-adds and
            # exp against numpy's, over 30 recurrent steps); a wrong state is off by O(1)
            assert err <= (2e-3 if v.dtype == "f16" else 1e-3), f"{name}: rel err {err:.2e}"
        lg = ex.read_logits()
        assert np.abs(lg - r["logits"]).max() <= 1e-3 * np.abs(r["logits"]).max()
        assert nxt == int(r["next_token"][0])
        after = [nxt] + list(ex.decode(nxt, len(toks), 8))
    with Decoder(make_executor(mode, device, m.program, m.weights)) as dec:
        nxt = dec.run_prompt(toks, 0)  # no chunks: the token path
        assert [nxt] + list(dec.executor.decode(nxt, len(toks), 8)) == after


class OracleDrafts:
    """PromptLookup's interface, drafting the plain decode's next K tokens (`truth`: the prompt and
    its plain tokens), wrong from row (turn mod K + 1) on: every count of accepted drafts, 0..K,
    in turn (the tiny random models never repeat themselves enough for prompt lookup)."""

    def __init__(self, truth: list[int], k: int):
        self.truth, self.k, self.tokens, self.turn = truth, k, [], 0

    def extend(self, toks) -> None:
        self.tokens.extend(int(t) for t in toks)

    def draft(self) -> list[int]:
        i, bad = len(self.tokens), self.turn % (self.k + 1)
        self.turn += 1
        nxt = self.truth[i : i + self.k]
        return [t if j < bad else (t + 1) % 290 for j, t in enumerate(nxt)] if len(nxt) == self.k else []


def check_speculative_equals_plain(device, m) -> None:
    """Speculative decode: a verify step's rejected rows are taken back out of the recurrent states
    (a copy before it, its accepted rows run again), so greedy output is plain decode's token for
    token, whether a verify step accepts no draft, some, or all."""
    from unittest import mock

    from tests.executors.test_speculative import plain_tokens, spec_tokens

    k, prompt = 4, [int(t) for t in np.random.default_rng(7).integers(3, 290, 12)]
    for mode in ("fused", "unfused"):
        with Decoder(make_executor(mode, device, m.program, m.weights)) as dec:
            dec.set_prefill((4, 8))  # a rerun of 4 or 5 rows takes a 4-row chunk
            plain = plain_tokens(dec, prompt, 40)
            dec.set_speculative(k, always_verify=True)
            drafts = "vkdecode.executors.speculative.PromptLookup"
            with mock.patch(drafts, lambda k, truth=prompt + plain: OracleDrafts(truth, k)):
                spec = spec_tokens(dec, prompt, 40)
            st = dec.speculative.stats
        assert spec == plain, mode
        assert st.verify_steps >= 8 and 0 < st.accepted < st.drafted, st.as_dict()


def multimodal_model(path, config_cls: str, model_cls: str, text: dict):
    """A tiny random `model_cls` (a Qwen3.5 ForConditionalGeneration: a one-block vision tower and
    the text model of `text`) saved at path with the tiny tokenizer; cached by path."""
    import torch
    import transformers

    if not (path / "config.json").exists():
        vision = {
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "out_hidden_size": 64,
        }
        cfg = getattr(transformers, config_cls)(text_config=text, vision_config=vision)
        torch.manual_seed(1)
        model = getattr(transformers, model_cls)(cfg).eval()
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p)) if "norm" in name else p.normal_(0.0, 0.3)
        model.save_pretrained(path)
        write_tiny_tokenizer(path)
    return path


def check_multimodal_generate(device, path, model_cls: str, ctx: int) -> None:
    """Greedy tokens of the checkpoint's text model equal transformers' generate on the same ids."""
    import torch
    import transformers

    import vkdecode

    hf = getattr(transformers, model_cls).from_pretrained(path, dtype=torch.float32).eval()
    ids = [5, 9, 17, 33, 2, 70, 11, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52]
    with vkdecode.load(str(path), device=device, ctx=ctx) as model:
        got = [r.token for r in model.stream_generate(prompt_ids=ids, max_tokens=8)]
    up_to_eos(got, hf_greedy(hf, ids, 8))

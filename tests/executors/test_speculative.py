"""Speculative decoding (vkdecode/executors/speculative.py): the prompt-lookup drafter, and greedy
output identical to plain decode token for token on repetitive and non-repetitive prompts, in every
mode and through the GPU narrow matmul, with acceptance counted; a verify step's dispatches."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import tiny_hf_model
from vkdecode.errors import UsageError
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.executors.speculative import DECLINE_BURST, PromptLookup, VerifyPolicy
from vkdecode.lowering.calls import KernelCaps
from vkdecode.models.loader import load_model


def test_prompt_lookup_drafts_what_followed_the_latest_match():
    look = PromptLookup(3, min_ngram=1)
    look.extend([1, 2, 3, 4, 5, 9, 2, 3, 7, 8])
    assert look.draft() == []  # 8 never occurred before
    look.extend([2, 3])
    assert look.draft() == [7, 8, 2]  # "2 3" latest at 6..7, followed by 7 8 2
    look.extend([4])
    assert look.draft() == [5, 9, 2]  # "2 3 4" (3-gram) at 1..3
    assert PromptLookup(3).draft() == []  # default: no 1-token matches
    two = PromptLookup(3)
    two.extend([1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 5])
    assert two.draft() == []  # only "5" matched: not drafted by default
    short = PromptLookup(4, min_ngram=1)
    short.extend([5, 6, 5])
    assert short.draft() == [6, 5, 6, 5]  # reaches the end: continues periodically


def plain_tokens(dec, toks, n):
    ex = dec.executor
    nxt = dec.run_prompt(toks, 0)
    return [nxt] + list(ex.decode(nxt, len(toks), n - 1))


def spec_tokens(dec, toks, n):
    nxt = dec.run_prompt(toks, 0)
    return [nxt] + list(dec.speculative.run(list(toks), nxt, len(toks), n - 1))


@pytest.fixture(scope="module")
def tiny(models_dir):
    return load_model(tiny_hf_model("qwen3", models_dir), ctx=96)


def prompts():
    rng = np.random.default_rng(7)
    rand = [int(t) for t in rng.integers(3, 290, 20)]
    rep = [int(t) for t in rng.integers(3, 290, 8)] * 4  # a repetitive prompt
    return {"random": rand, "repetitive": rep, "short": [11, 12, 13]}


@pytest.mark.parametrize("mode", ["unfused", "replay-nofuse", "fused"])
def test_speculative_equals_plain_decode(device, tiny, mode):
    m = tiny
    n = 40
    with Decoder(make_executor(mode, device, m.program, m.weights)) as dec:
        ex = dec.executor
        dec.set_prefill((8,))
        plain = {name: plain_tokens(dec, p, n) for name, p in prompts().items()}
        dec.set_speculative(4, always_verify=True)
        spec = {name: spec_tokens(dec, p, n) for name, p in prompts().items()}
        st = dec.speculative.stats
    assert spec == plain
    assert st.verify_steps > 0 and st.drafted > 0
    # the tiny random model falls into loops quickly, and the drafter catches them
    assert st.accepted > 0, st.as_dict()
    assert st.emitted == sum(len(t) - 1 for t in spec.values())
    if mode != "unfused":
        c = ex.token_stats  # cleared by nothing here: the verify steps' counters are replays
        assert all(s.counters.command_buffer_recordings == 0 for s in c)


def test_speculative_near_the_end_of_the_context(device, tiny):
    """Verify steps stop where K+1 rows no longer fit; plain steps finish the context."""
    m = tiny
    toks = prompts()["repetitive"][:24]
    with Decoder(make_executor("fused", device, m.program, m.weights)) as dec:
        dec.set_prefill((8,))
        plain = plain_tokens(dec, toks, 96 - 24 + 1)
        dec.set_speculative(6, always_verify=True)
        assert spec_tokens(dec, toks, 96 - 24 + 1) == plain
        assert len(plain) == 96 - 24 + 1


def narrow_caps(device):
    """The GPU choice, forced on lavapipe (its own caps keep the tiled kernel): chunks of up to 16
    rows through matmul_rows_narrow, wider ones through matmul_rows_wide."""
    return KernelCaps.from_info(device.info, prefill_chunk_rows=-1, matmul_narrow=16, matmul_wide=0)


@pytest.mark.parametrize("k", [8, 2])
def test_narrow_verify_equals_plain_decode(device, tiny, k):
    """Verify steps of K + 1 rows through the GPU narrow matmul, replayed: greedy output token for
    token."""
    m = tiny
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=narrow_caps(device))) as dec:
        ex = dec.executor
        plain = {name: plain_tokens(dec, p, 40) for name, p in prompts().items()}
        dec.set_speculative(k, always_verify=True)
        assert "matmul_rows_narrow" in {it.call.shader for it in dec.speculative.verify.items}
        spec = {name: spec_tokens(dec, p, 40) for name, p in prompts().items()}
        st = dec.speculative.stats
        assert all(s.counters.command_buffer_recordings == 0 for s in ex.token_stats)
    assert spec == plain
    assert st.verify_steps > 0 and st.accepted > 0, st.as_dict()


def test_verify_step_dispatches(device, models_dir):
    """A 9-row verify step (K = 8) runs one kernel per op op by op: 16 dispatches a layer, and the
    embed, the final norm, the lm_head and the argmax; fused, only the chunk rules apply (the
    decode rules never do): each residual add with the norm after it is one kernel, two a layer.
    Region stats count every dispatch and every op."""
    m = load_model(tiny_hf_model("llama", models_dir), ctx=48)
    layers = m.args.n_layers
    counts = {}
    for mode in ("fused", "replay-nofuse"):
        with Decoder(make_executor(mode, device, m.program, m.weights, caps=narrow_caps(device))) as dec:
            dec.set_speculative(8)
            v = dec.speculative.verify
            assert {r.rule for r in v.regions} == (
                {None, "ADD_RMS_NORM_CHUNK"} if mode == "fused" else {None}
            )
            counts[mode] = len(v.items)
            rs = v.region_stats()
            assert sum(r["dispatches"] for r in rs) == len(v.items)
            assert sum(r["ops"] for r in rs) == len(v.program.ops)
    assert counts == {"fused": 14 * layers + 4, "replay-nofuse": 16 * layers + 4}


def test_verify_policy_checks_drafts_only_while_they_pay():
    p = VerifyPolicy()
    assert p.pays()  # costs unknown: verify to learn them
    p.note_plain(1.0)
    p.note_verify(1.5, 2)  # 2 tokens for 1.5 plain steps' time: verifying pays
    assert p.pays() and p.pays()
    p.note_verify(1.5 + 4 * (4.0 - 1.5), 2)  # the running mean moves to 4 plain steps: a loss
    assert p.verify_s == 4.0
    declined = [p.pays() for _ in range(VerifyPolicy.PROBE_COST * 4)]
    assert declined == [False] * (VerifyPolicy.PROBE_COST * 4 - 1) + [True]  # probes: <= 1/8 of the time
    p.note_verify(40.0, 2)  # a verify costing ~13 plain steps: probes further apart
    gap = int(VerifyPolicy.PROBE_COST * p.verify_s / p.plain_s)
    assert [p.pays() for _ in range(gap)][-2:] == [False, True]
    for _ in range(30):
        p.note_verify(4.0, 8)  # the text turned repetitive: 8 tokens per verify
    assert p.pays()
    assert VerifyPolicy(always=True).pays()


def test_speculative_policy_keeps_plain_output(device, tiny):
    """With the cost policy deciding (timings of this run), greedy output stays the plain one."""
    toks = prompts()["repetitive"]
    with Decoder(make_executor("fused", device, tiny.program, tiny.weights)) as dec:
        dec.set_prefill((8,))
        plain = plain_tokens(dec, toks, 40)
        dec.set_speculative(4)
        assert spec_tokens(dec, toks, 40) == plain
        st = dec.speculative.stats
        assert st.verify_steps + st.plain_steps >= 1 and st.declined <= st.plain_steps


@pytest.mark.parametrize("mode", ["unfused", "fused"])
def test_declined_drafts_run_plain_bursts(device, tiny, mode):
    """A policy that finds verifying a loss (costs pinned: no probe within the run): each declined
    draft runs up to DECLINE_BURST plain steps back to back (the executor's pipelined decode in
    replay modes) before drafts are looked up again; the output stays the plain one."""
    toks = prompts()["repetitive"]
    n = 60
    with Decoder(make_executor(mode, device, tiny.program, tiny.weights)) as dec:
        dec.set_prefill((8,))
        plain = plain_tokens(dec, toks, n)
        dec.set_speculative(4)
        pol = dec.speculative.policy
        pol.plain_s, pol.verify_s, pol.tokens = 1.0, 100.0, 2.0  # a verify: 100 steps for 2 tokens
        pol.note_plain = lambda s: None
        pol.note_verify = lambda s, e: None
        assert spec_tokens(dec, toks, n) == plain
        st = dec.speculative.stats
    assert st.verify_steps == 0 and st.plain_steps == n - 1 and st.emitted == n - 1
    # the repetitive prompt keeps drafts coming: far fewer looks than tokens, and every burst step
    # counted toward the probe spacing (pol.declined: the steps run past declined drafts)
    assert 0 < st.declined <= -(-(n - 1) // DECLINE_BURST) + 2, st.as_dict()
    assert st.declined < pol.declined <= n - 1


@pytest.mark.parametrize("mode", ["unfused", "fused"])
def test_no_draft_turns_run_growing_bursts(device, tiny, mode):
    """no_draft_burst: where no draft is found, plain steps run back to back in bursts of 2, 4, ..
    up to the cap (the executor's pipelined decode), one again after a draft; every draft found is
    checked as before, and the output stays the plain one."""
    n = 48
    with Decoder(make_executor(mode, device, tiny.program, tiny.weights)) as dec:
        dec.set_prefill((8,))
        ex = dec.executor
        for name, toks in prompts().items():
            plain = plain_tokens(dec, toks, n)
            dec.set_speculative(4, always_verify=True, no_draft_burst=8)
            asked: list[int] = []
            decode = ex.decode
            ex.decode = lambda token, pos, steps, asked=asked, decode=decode: (
                asked.append(steps),
                decode(token, pos, steps),
            )[1]
            try:
                assert spec_tokens(dec, toks, n) == plain, name
            finally:
                del ex.decode  # the class's method again
            st = dec.speculative.stats
            assert st.emitted == n - 1 and st.declined == 0
            # powers of two up to 8 (the last one cut to the tokens left)
            assert all(1 < b <= 8 and b & (b - 1) == 0 for b in asked[:-1]) and asked[-1:] <= [8], asked
            if name == "short":  # three tokens: no draft until the model loops
                assert asked and asked[0] == 2, asked


def test_speculative_refuses_sampling(device, models_dir):
    m = load_model(tiny_hf_model("llama", models_dir), ctx=32, sampling=True)
    with (
        Decoder(make_executor("fused", device, m.program, m.weights)) as dec,
        pytest.raises(UsageError, match="greedy"),
    ):
        dec.set_speculative(3)

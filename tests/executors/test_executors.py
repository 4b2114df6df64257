"""Every executor against the numpy reference, and the counters that prove the steady state."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import LLAMA3_ROPE, YARN_ROPE, tiny_hf_model
from tests.helpers.reference_run import greedy_against_reference, replay_host_work
from vkdecode.errors import ContextError
from vkdecode.executors import make_executor
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

# name -> (family, tiny_hf_model overrides); llama3-rope / yarn-rope: rope scaling; gemma3: GeGLU,
# sandwich norms, sliding window 6 < STEPS on layer 0, a global layer 1 with another rope base
MODELS = {
    "llama": ("llama", {}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
    "llama3-rope": ("llama", {"rope_scaling": LLAMA3_ROPE}),
    "yarn-rope": ("qwen3", {"rope_scaling": YARN_ROPE}),
    "gemma3": ("gemma3", {}),
}
ARCHS = tuple(MODELS)
STEPS = 32


@pytest.fixture(scope="module")
def tiny(models_dir):
    return {a: load_model(tiny_hf_model(f, models_dir, **over), ctx=48) for a, (f, over) in MODELS.items()}


_run = greedy_against_reference


@pytest.mark.parametrize("kv_dtype", ["f16", "f32"])
@pytest.mark.parametrize("arch", ARCHS)
def test_modes_match_reference_and_each_other(device, tiny, models_dir, arch, kv_dtype):
    f, over = MODELS[arch]
    m = (
        tiny[arch]
        if kv_dtype == "f16"
        else load_model(tiny_hf_model(f, models_dir, **over), ctx=48, kv_dtype="f32")
    )
    ref = Reference(m.program, m.weights)
    out = {}
    for mode in ("unfused", "replay-nofuse", "fused"):
        with make_executor(mode, device, m.program, m.weights) as ex:
            out[mode] = _run(ex, ref, STEPS)
    # replay without fusion runs the very same kernels: bit-identical logits and tokens
    assert out["replay-nofuse"][0] == out["unfused"][0]
    for a, b in zip(out["replay-nofuse"][1], out["unfused"][1]):
        np.testing.assert_array_equal(a, b)
    assert out["fused"][0] == out["unfused"][0]


def test_unfused_counters_follow_the_op_list(device, tiny):
    m = tiny["llama"]
    with make_executor("unfused", device, m.program, m.weights) as ex:
        for pos in range(3):
            ex.step(1, pos)
        c = ex.token_stats[-1].counters
        n = len(ex.items)
        assert n >= len(m.program.ops)  # one or more dispatches per op, never fewer
        assert c.dispatches == c.pipeline_binds == c.descriptor_set_binds == n
        assert c.descriptor_set_allocations == n
        assert c.descriptor_writes == sum(len(it.ranges) for it in ex.items)
        assert c.command_buffer_recordings == 1 and c.submits == 1
        assert c.barriers == 2 + sum(it.barrier for it in ex.items)  # + step start, host read


@pytest.mark.parametrize("mode", ["replay-nofuse", "fused"])
def test_replay_steady_state_has_no_host_work_but_one_submit(device, tiny, mode):
    m = tiny["qwen3"]
    with make_executor(mode, device, m.program, m.weights) as ex:
        assert replay_host_work(ex) == {(0, 0, 0, 0, 0, 1)}


def test_replay_decodes_to_the_last_position_and_stops(device, models_dir):
    m = load_model(tiny_hf_model("llama", models_dir), ctx=12)
    ref = Reference(m.program, m.weights)
    with make_executor("fused", device, m.program, m.weights) as ex:
        _run(ex, ref, 12)  # positions 0 .. ctx-1, the last one included
        with pytest.raises(ContextError, match="outside the context"):
            ex.step(1, 12)


def test_env_switches_fusion_off(device, tiny, monkeypatch):
    monkeypatch.setenv("VKDECODE_NOFUSE", "1")
    m = tiny["llama"]
    with make_executor("fused", device, m.program, m.weights) as ex:
        assert ex.mode == "replay-nofuse"
        assert all(r.rule is None for r in ex.regions)


@pytest.mark.parametrize("k", [3, 8])
def test_tokens_per_submit_decodes_the_same_tokens(device, tiny, k):
    """K recorded steps per submit: the same greedy tokens as one step per submit, to the end of
    the context (47 tokens: whole batches, then the remainder one by one), one submit per K."""
    m = tiny["qwen2"]
    out = {}
    for kk in (1, k):
        with make_executor("fused", device, m.program, m.weights, tokens_per_submit=kk) as ex:
            first = ex.step(5, 0)
            out[kk] = list(ex.decode(first, 1, 100))
            steps = ex.token_stats[1:]
            assert len(out[kk]) == len(steps) == m.ctx - 1
            submits = sum(s.counters.submits for s in steps)
            assert submits == (m.ctx - 1) // kk + (m.ctx - 1) % kk
            assert all(s.gpu_us > 0 for s in steps)
            # closing the generator early waits for the batches in flight and leaves the executor usable
            gen = ex.decode(first, 1, 100)
            assert next(gen) == out[kk][0]
            gen.close()
            assert ex.step(5, 0) == first
    assert out[k] == out[1]


def test_tokens_per_submit_is_bounded(device, tiny):
    m = tiny["llama"]
    for k in (0, 33):
        with pytest.raises(ValueError, match="tokens_per_submit"):
            make_executor("fused", device, m.program, m.weights, tokens_per_submit=k)


@pytest.mark.parametrize("mode", ["fused", "replay-nofuse", "unfused"])
def test_greedy_steps_hand_off_the_token_in_the_final_argmax(device, tiny, mode, monkeypatch):
    """Greedy steps end in argmax's final pass, which also advances the step (no advance_step
    dispatch); pipelined decode then feeds the GPU's tokens on, as the reference chooses them."""
    m = tiny["llama"]
    with make_executor(mode, device, m.program, m.weights) as ex:
        shaders = [it.call.shader for it in ex.items]
        assert "advance_step" not in shaders and shaders[-1] == "argmax"
        assert ("ADVANCE", "1") in ex.items[-1].call.defines
        ref = Reference(m.program, m.weights, dtype=np.float64)
        want, tok = [], 7
        for pos in range(12):
            tok = int(ref.step(tok, pos)["next_token"][0])
            want.append(tok)
        assert list(ex.decode(7, 0, 12)) == want


def test_sampling_steps_keep_the_advance_dispatch(device, models_dir):
    from vkdecode.executors.plan import with_advance
    from vkdecode.lowering.ops import op_calls
    from vkdecode.models import build_program

    m = load_model(tiny_hf_model("llama", models_dir), ctx=16)
    p = build_program(m.args, 16, {n: w.dtype for n, w in m.weights.items()}, sampling=True)
    from vkdecode.lowering.calls import KernelCaps

    caps = KernelCaps.from_info(device.info)
    calls = [c for i in range(len(p.ops)) for c in op_calls(p, i, caps)]
    assert calls[-1].shader == "sample"
    out, added = with_advance(calls)
    assert added and out[-1].shader == "advance_step" and out[:-1] == calls

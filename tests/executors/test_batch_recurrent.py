"""Batched decode of the Qwen3.5 family (executors/batch.py over linear-attention layers: a recurrent
state copy a slot, fusion/chunk_batch.py): every sequence gives the greedy tokens it gives alone,
whatever joins, leaves, pads or stepped in its slot before it, in every mode, with a GPU's kernels,
with steps sent ahead and with a lone sequence on the decoder's own step (solo); no prefix of a
state is ever reused. Sampled rows: test_batch.py's test_sampled_rows_equal_alone."""

from __future__ import annotations

import pytest

from tests.executors.test_batch import CTX, alone, batched, build, prompts
from tests.helpers.make_models import tiny_hf_model
from vkdecode.executors.batch import BatchDecode
from vkdecode.executors.decoder import Decoder
from vkdecode.executors.state_checkpoint import StateCheckpoint
from vkdecode.lowering.calls import KernelCaps
from vkdecode.models.loader import load_model
from vkdecode.options import DecodeOptions
from vkdecode.prompt_cache import KVPrefix


@pytest.fixture(scope="module", params=["qwen35", "qwen35moe", "qwen3next"])
def tiny(request, models_dir):
    return load_model(tiny_hf_model(request.param, models_dir), ctx=CTX)


@pytest.mark.parametrize("mode", ["fused", "unfused", "replay-nofuse", "fused-ahead"])
def test_each_sequence_equals_alone(device, tiny, mode):
    """4 prompts of different lengths leave at different times: width 4, then 3 live and a padding
    row, then 2 and 1; fused-ahead: each step sends the next one ahead (batch_ahead.py), so a
    sequence that leaves has had its state stepped past its last token."""
    mode, ahead = mode.removesuffix("-ahead"), mode.endswith("-ahead")
    ps, counts = prompts((5, 11, 3, 17)), [9, 2, 6, 4]
    with build(device, tiny, mode) as dec:
        assert dec.ctx == CTX  # the KV caches' rows, not a recurrent state's size (its first state)
        want = [alone(dec, p, n) for p, n in zip(ps, counts)]
        with BatchDecode(dec, (1, 2, 4), pipelined=ahead) as b:
            got = batched(b, ps, counts)
            assert all(b.steps[w] > 0 for w in (4, 2, 1)), b.steps
    assert got == want
    assert (b.ahead.collected > 0) == ahead


def test_gpu_kernels_and_f16_caches_equal_alone(device, tiny):
    """A GPU's kernel choices on any device: the delta rule's lanes a column (device_cpu off), the
    fused attention_rows, prompt chunks in blocks (delta_block), and f16 KV caches."""
    caps = KernelCaps.from_info(device.info, device_cpu=False, attn_rows_fused=1, delta_block=16)
    opts = DecodeOptions(mode="fused", ctx=CTX, prefill=(8,), caps=caps, kv_dtype="f16")
    ps, counts = prompts((5, 11, 3, 17)), [9, 2, 6, 4]
    with Decoder.build(device, tiny.program, tiny.weights, opts) as dec:
        want = [alone(dec, p, n) for p, n in zip(ps, counts)]
        with BatchDecode(dec, (1, 2, 4), pipelined=True) as b:
            assert batched(b, ps, counts) == want
            assert any(("FUSED", "1") in it.call.defines for it in b.runners[4].items)


@pytest.mark.parametrize("solo,ahead", [(False, False), (True, True)])
def test_joins_and_leaves_over_used_slots(device, tiny, solo, ahead):
    """Two slots: sequences join while another steps (the first alone: solo), leave, and the next
    ones take the slots they left; a second turn of a chat (its prompt starts with the first turn's
    tokens, which the prompt cache and the slot hold) runs from position 0; every sequence gives
    its tokens alone, the last one back on the decoder's step (solo) from its slot."""
    a, b_ids, c, d = prompts((6, 13, 4, 9), seed=5)
    with build(device, tiny, "fused") as dec:
        first = alone(dec, a, 5)
        turn2 = a + first + [7, 8]
        # steps sent ahead give a joining or leaving sequence no token in some steps: each gets a
        # prefix of these
        want = {
            n: alone(dec, ids, 14) for n, ids in zip(("a", "b", "turn2", "c", "d"), (a, b_ids, turn2, c, d))
        }
        kv = KVPrefix()  # rewindable: the batch must still reuse nothing of a recurrent state
        with BatchDecode(dec, (1, 2), solo=solo, pipelined=ahead) as bd:
            got, slot = {}, {}

            def join(name, ids, at):
                slot[name] = bd.begin(ids, None, kv)
                assert slot[name] == at and bd.joining.cached == 0, (name, slot[name])
                while (joined := bd.advance(rows=8)) is None:
                    pass
                got[name] = [joined[1]]

            def steps(n):
                for _ in range(n):
                    for s, tok in bd.step().items():
                        got[next(k for k, x in slot.items() if x == s)].append(tok)

            def leave(name):
                bd.leave(slot.pop(name))

            join("a", a, 0)
            steps(2)
            join("b", b_ids, 1)  # a (solo: on the decoder's step) moves into its slot
            steps(2)
            leave("a")
            join("turn2", turn2, 0)  # a's slot, and a's tokens in the prompt cache
            steps(5)
            leave("b")
            join("c", c, 1)
            steps(3)
            leave("turn2")
            join("d", d, 0)
            steps(3)
            leave("c")
            steps(1)  # d alone (solo: its state copied back from its slot)
            leave("d")
    assert {n: want[n][: len(got[n])] for n in want} == got
    assert all(len(got[n]) >= 3 for n in got), got


@pytest.mark.parametrize("solo", [False, True])
def test_a_chats_next_turn_joins_from_the_checkpoint(device, tiny, solo):
    """With the prompt cache's state checkpoint (executors/state_checkpoint.py), a join whose prompt
    starts with the last joined prompt restores that prompt's states and runs only what follows,
    while the first turn still steps (its state in its slot, or on the decoder's step: solo); a
    prompt that does not start with it runs whole. Each gives its tokens alone."""
    a, b_ids = prompts((9, 7), seed=8)
    with build(device, tiny, "fused") as dec:
        first = alone(dec, a, 6)
        turn2 = a + first + [7, 8]
        want = {"a": first, "turn2": alone(dec, turn2, 6), "b": alone(dec, b_ids, 6)}
        kv = KVPrefix()
        kv.rewindable, kv.checkpoint = False, StateCheckpoint(dec.executor)
        try:
            with BatchDecode(dec, (1, 2), solo=solo, pipelined=True) as bd:
                got, slot, cached = {}, {}, {}
                for name, ids in (("a", a), ("turn2", turn2), ("b", b_ids)):
                    if len(slot) == 2:
                        bd.leave(slot.pop("a"))
                    slot[name] = bd.begin(ids, None, kv)
                    cached[name] = bd.joining.cached
                    while (joined := bd.advance(rows=8)) is None:
                        pass
                    got[name] = [joined[1]]
                    while len(got[name]) < 6:
                        for s, tok in bd.step().items():
                            got[next(k for k, x in slot.items() if x == s)].append(tok)
        finally:
            kv.checkpoint.close()
    assert cached == {"a": 0, "turn2": len(a), "b": 0}
    assert {n: got[n][:6] for n in got} == want  # a and turn2 step on while the next one runs


def test_no_kv_cache_at_all(device, models_dir):
    """Every layer linear (a Qwen3.5 cut to its first layers, as `--layers 2` of a real shape): no KV
    cache to give slots to, only the states' copies; each sequence still equals itself alone."""
    m = load_model(tiny_hf_model("qwen35", models_dir, layer_types=["linear_attention"] * 4), ctx=CTX)
    ps, counts = prompts((5, 11, 3)), [4, 6, 2]
    with build(device, m, "fused") as dec:
        want = [alone(dec, p, n) for p, n in zip(ps, counts)]
        with BatchDecode(dec, (1, 2, 4)) as b:
            assert batched(b, ps, counts) == want

"""Batched decode (executors/batch.py): every sequence of a batch gives the tokens it gives alone
(greedy and sampled, every architecture, prompts of different lengths, sequences leaving early and
the width shrinking), and per width the replayed step costs 0 descriptor writes, 0 recordings and
1 submit; each slot keeps the rows of the chat that left it for that chat's next turn."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.make_models import load_smollm2, mxfp4_hf_model, tiny_hf_model, write_gguf
from vkdecode.errors import ContextError, UsageError
from vkdecode.executors.batch import BatchDecode
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.models.loader import load_model
from vkdecode.options import DecodeOptions
from vkdecode.sampling import SamplingParams

CTX = 40
LENGTHS = (5, 11, 3, 17, 8, 6)


def prompts(lengths=LENGTHS, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, 290, n)] for n in lengths]


def alone(dec: Decoder, ids: list[int], n: int, params=None) -> list[int]:
    """n tokens of one sequence through the decoder on its own (prompt, then pipelined decode)."""
    dec.executor.set_sampling(params or SamplingParams())
    first = dec.run_prompt(ids, 0)
    return [first] + list(dec.decode(first, len(ids), n - 1))


def batched(b: BatchDecode, ps, counts, params=None) -> list[list[int]]:
    """Tokens of each prompt, all joined at once; prompt i leaves after counts[i] tokens."""
    slot_of, out = {}, [[] for _ in ps]
    for i, ids in enumerate(ps):
        slot, first = b.join(ids, params[i] if params else None)
        slot_of[slot] = i
        out[i].append(first)
    while b.rows:
        for slot in [s for s in b.rows if len(out[slot_of[s]]) >= counts[slot_of[s]]]:
            b.leave(slot)
        for slot, tok in b.step().items():
            out[slot_of[slot]].append(tok)
    return out


def build(device, m, mode, caps=None):
    opts = DecodeOptions(mode=mode, ctx=CTX, prefill=(8,), caps=caps)
    return Decoder.build(device, m.program, m.weights, opts)


@pytest.fixture(scope="module")
def tiny(models_dir):
    models = {
        a: load_model(tiny_hf_model(a, models_dir), ctx=CTX)
        for a in ("llama", "qwen2", "qwen3", "gemma3", "gpt_oss")
    }
    # the experts as OpenAI ships them, kept as mxfp4 on the device
    mx = mxfp4_hf_model(tiny_hf_model("gpt_oss", models_dir), models_dir / "hf-gpt_oss-mxfp4")
    models["gpt_oss_mxfp4"] = load_model(mx, ctx=CTX)
    assert models["gpt_oss_mxfp4"].weights["layers.0.exp_down"].dtype == "mxfp4"
    return models


@pytest.mark.parametrize("mode", ["fused", "unfused", "fused-ahead"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3", "gpt_oss", "gpt_oss_mxfp4"])
def test_each_sequence_equals_alone(device, tiny, arch, mode):
    """fused-ahead: each step sends the next one ahead (batch_ahead.py), whose results are dropped
    whenever a sequence leaves before it is collected."""
    mode, ahead = mode.removesuffix("-ahead"), mode.endswith("-ahead")
    m = tiny[arch]
    ps = prompts()
    counts = [12, 4, 9, 2, 7, 1]  # sequences leave early, one right after its prompt
    with build(device, m, mode) as dec:
        want = [alone(dec, p, n) for p, n in zip(ps, counts)]
        with BatchDecode(dec, (1, 2, 4, 8), pipelined=ahead) as b:
            got = batched(b, ps, counts)
            # 5 live -> width 8 with 3 padding rows, then 4, 2, 1 as sequences leave
            assert all(b.steps[w] > 0 for w in (8, 4, 2, 1)), b.steps
    assert got == want
    # closed: every step sent ahead was either used or dropped; some were used for the rows still
    # in them after others had left (batch_ahead.collect)
    assert (b.ahead.collected > 0) == ahead and b.ahead.collected + b.ahead.dropped == b.ahead.submits
    assert (b.ahead.partial > 0) == ahead


@pytest.mark.parametrize("kv", ["f16", "f32"])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3", "gpt_oss", "gpt_oss_mxfp4"])
def test_fused_attention_rows_equal_alone(device, tiny, arch, kv):
    """caps.attn_rows_fused: each layer's (q/k norm,) rope, KV write and attention of a batched step
    as one attention_rows (FUSED): each sequence's tokens as alone, with padding rows (5 live at
    width 8), sequences leaving, sliding windows (gemma3, gpt_oss), sinks (gpt_oss) and both cache
    types."""
    caps = KernelCaps.from_info(device.info, attn_rows_fused=1)
    m, ps, counts = tiny[arch], prompts(), [12, 4, 9, 2, 7, 1]
    opts = DecodeOptions(mode="fused", ctx=CTX, prefill=(8,), caps=caps, kv_dtype=kv)
    with Decoder.build(device, m.program, m.weights, opts) as dec:
        want = [alone(dec, p, n) for p, n in zip(ps, counts)]
        with BatchDecode(dec, (1, 2, 4, 8)) as b:
            got = batched(b, ps, counts)
            calls = [it.call for it in b.runners[8].items]
    assert got == want
    shaders = {c.shader for c in calls}
    assert "rope_rows" not in shaders and "kv_write_rows" not in shaders, shaders
    assert any(c.shader == "attention_rows" and ("FUSED", "1") in c.defines for c in calls)


def test_fused_attention_rows_by_default_on_gpus(device, tiny):
    """attn_rows_fused 0 (automatic): the fused attention_rows where the caps are a GPU's (measured
    there), the ops' kernels on a CPU's; < 0 never."""
    m = tiny["qwen3"]
    base = KernelCaps.from_info(device.info)

    def fused(**kw) -> bool:
        opts = DecodeOptions(mode="fused", ctx=CTX, prefill=(8,), caps=replace(base, **kw))
        with Decoder.build(device, m.program, m.weights, opts) as dec, BatchDecode(dec, (4,)) as b:
            return any(("FUSED", "1") in it.call.defines for it in b.runners[4].items)

    assert fused(device_cpu=False) and not fused(device_cpu=True)
    assert not fused(device_cpu=False, attn_rows_fused=-1) and fused(device_cpu=True, attn_rows_fused=1)


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q6_k"])
def test_every_weight_dtype(device, models_dir, dtype):
    """Every weight dtype through the batched step's matmuls (the decode matvec over the rows:
    K-quants in 8-weight units: 256-wide rows, or the file falls back to q5_0) against each
    sequence alone."""
    hf = tiny_hf_model("qwen2", models_dir, hidden_size=256, intermediate_size=512)
    path = write_gguf(hf, models_dir / f"batch-qwen2-256.{dtype}.gguf", dtype)
    m = load_model(path, ctx=CTX)
    assert dtype in {v.dtype for v in m.program.values.values() if v.kind == "weight"}
    ps = prompts((7, 3, 12))
    with build(device, m, "fused") as dec:
        want = [alone(dec, p, 6) for p in ps]
        with BatchDecode(dec, (4,)) as b:
            assert batched(b, ps, [6] * 3) == want


@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
def test_split_wide_units(device, models_dir, dtype):
    """A GPU's wide K-quant units in the batched step's matvecs (kwide, kw_split forced, the GPU
    launch shapes: kwide_rows.glsl's x-row loop) give each sequence's tokens alone."""
    caps = KernelCaps.from_info(device.info, kwide=1, kw_split=1, kq_idot=-1, matvec_wg=0, matvec_rows=0)
    hf = tiny_hf_model("qwen2", models_dir, hidden_size=256, intermediate_size=512)
    m = load_model(write_gguf(hf, models_dir / f"batch-qwen2-256.{dtype}.gguf", dtype), ctx=CTX)
    ps = prompts((7, 3, 12, 5, 9))
    with build(device, m, "fused", caps) as dec:
        want = [alone(dec, p, 5) for p in ps]
        with BatchDecode(dec, (8,)) as b:
            calls = [it.call for it in b.runners[8].items if it.call.shader == "matmul"]
            assert calls and all("KW_JOINT" not in dict(c.defines) for c in calls)
            assert any({"WVEC", "MV_XROWS"} <= dict(c.defines).keys() for c in calls)
            assert batched(b, ps, [5] * 5) == want


@pytest.mark.parametrize(
    "batch_matvec,narrow,shader", [(-1, -1, "matmul_rows"), (-1, 16, "matmul_rows_narrow"), (8, -1, "matmul")]
)
def test_chunk_matmul_and_matvec_rows_agree(device, tiny, batch_matvec, narrow, shader):
    """A GPU's batched step takes the chunk matmuls (batch_matvec < 0 forces them on lavapipe; the
    narrow kernel with matmul_narrow 16, as on GPUs) and a CPU's the decode matvec over all rows
    (forced on at 8): the same tokens every way."""
    m = tiny["llama"]
    caps = KernelCaps.from_info(device.info, batch_matvec=batch_matvec, matmul_narrow=narrow, matmul_coop=-1)
    ps = prompts((5, 9, 4))
    with build(device, m, "fused", caps) as dec:
        want = [alone(dec, p, n) for p, n in zip(ps, (7, 3, 5))]
        with BatchDecode(dec, (1, 2, 4)) as b:
            shaders = {it.call.shader for it in b.runners[4].items}
            assert (
                shader in shaders and not {"matmul", "matmul_rows", "matmul_rows_narrow"} - {shader} & shaders
            )
            assert batched(b, ps, [7, 3, 5]) == want


def test_replay_steps_make_no_descriptor_writes_or_recordings(device, tiny):
    m = tiny["llama"]
    with build(device, m, "fused") as dec, BatchDecode(dec, (1, 2, 4)) as b:
        batched(b, prompts((4, 6, 9, 5)), [6, 3, 5, 2])
        stats = b.stats()
        for w in (4, 2, 1):
            assert stats[w]["steps"] > 0
            assert {k: stats[w][k] for k in stats[w] if k != "steps"} == {
                "descriptor_writes": 0,
                "descriptor_set_allocations": 0,
                "command_buffer_recordings": 0,
                "recorded_commands": 0,
                "submits": 1,
            }, (w, stats[w])


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("arch", ["qwen2", "qwen35"])  # qwen35: recurrent states (test_batch_recurrent.py)
def test_sampled_rows_equal_alone(device, models_dir, arch, ahead):
    m = load_model(tiny_hf_model(arch, models_dir), ctx=CTX, sampling=True)
    ps = prompts((6, 9, 4))
    params = [SamplingParams(0.9, 0, 1.0, 7), SamplingParams(0.0), SamplingParams(1.3, 20, 0.9, 123)]
    with build(device, m, "fused") as dec:
        want = [alone(dec, p, 8, q) for p, q in zip(ps, params)]
        with BatchDecode(dec, (4,), pipelined=ahead) as b:
            assert batched(b, ps, [8] * 3, params) == want


@pytest.mark.parametrize("ahead", [False, True])
def test_more_joins_than_slots_and_context_end(device, tiny, ahead):
    """pipelined: no step is sent ahead past the last context row (it would write another slot's)."""
    m = tiny["qwen3"]
    with build(device, m, "fused") as dec, BatchDecode(dec, (1, 2), pipelined=ahead) as b:
        for ids in prompts((3, 4)):
            b.join(ids, None)
        with pytest.raises(UsageError, match="slots are taken"):
            b.join([5, 6], None)
        b.leave(0)
        slot, _ = b.join([7] * (CTX - 1), None)  # its first step runs at CTX - 1, the last row
        b.step()
        with pytest.raises(ContextError, match="must leave"):
            b.step()
        b.leave(slot)
        assert set(b.step()) == {1}


@pytest.mark.parametrize("mode", ["fused", "unfused", "fused-ahead"])
def test_a_prompt_joins_a_piece_at_a_time_while_another_steps(device, tiny, mode):
    """begin / advance: a 30-token prompt runs as its pieces (lavapipe: three 8-row chunks and six
    decode steps; GPUs pad the tail into a fourth chunk), one piece per advance(), with a step of
    the live sequence after each; both give their tokens alone."""
    m = tiny["qwen2"]
    short, long = prompts((5, 30), seed=3)
    mode, ahead = mode.removesuffix("-ahead"), mode.endswith("-ahead")
    with build(device, m, mode) as dec:
        want = [alone(dec, short, 14), alone(dec, long, 4)]
        with BatchDecode(dec, (1, 2), pipelined=ahead) as b:
            s0, first = b.join(short, None)
            got = {s0: [first]}
            s1 = b.begin(long, None)
            assert b.free == [] and s1 != s0 and set(b.rows) == {s0}
            with pytest.raises(UsageError, match="has not finished"):
                b.begin(short, None)
            pieces = 0
            while (joined := b.advance()) is None:
                pieces += 1
                got[s0].append(b.step()[s0])  # the live sequence steps while the prompt runs
            want_pieces = len(dec.prompt_pieces(long))
            assert want_pieces > 2 and pieces == want_pieces - 1 and len(got[s0]) == pieces + 1
            got[s1] = [joined[1]]
            while len(got[s1]) < 4:
                for slot, tok in b.step().items():
                    got[slot].append(tok)
            while len(got[s0]) < 14:
                b.leave(s1)
                got[s0].append(b.step()[s0])
    assert [got[s0], got[s1]] == want


def test_a_joining_prompt_that_leaves_frees_its_slot(device, tiny):
    """leave() mid-prompt: the slot is free at once; the rows its chunks wrote stay tracked, so the
    same prompt joining again runs only the rest, and gives its tokens alone."""
    from vkdecode.prompt_cache import KVPrefix

    m = tiny["llama"]
    (ids,) = prompts((30,), seed=4)
    with build(device, m, "fused") as dec:
        want = alone(dec, ids, 5)
        kv = KVPrefix()
        with BatchDecode(dec, (1,)) as b:
            slot = b.begin(ids, None, kv)
            assert b.advance(rows=16) is None  # two 8-row chunks in one turn
            b.leave(slot)
            assert b.free == [0] and b.joining is None and len(kv) == 16
            with pytest.raises(UsageError, match="no prompt is joining"):
                b.advance()
            slot, first = b.join(ids, None, kv)
            got = [first] + [b.step()[slot] for _ in range(4)]
    assert got == want


def test_a_sequence_that_leaves_keeps_its_rows_in_the_prompt_cache(device, tiny):
    """leave() copies the slot's rows back into the decoder's cache: the next turn (the prompt, its
    answer, more) runs only its new tokens and gives what it gives alone; a sequence that leaves
    while another prompt joins leaves the cache to that prompt."""
    from vkdecode.prompt_cache import KVPrefix

    m = tiny["llama"]
    ids, more = prompts((9, 4), seed=5)
    with build(device, m, "fused") as dec:
        answer = alone(dec, ids, 6)
        turn2 = ids + answer + more
        want = alone(dec, turn2, 5)
        kv = KVPrefix()
        with BatchDecode(dec, (1, 2)) as b:
            slot, first = b.join(ids, None, kv)
            got = [first] + [b.step()[slot] for _ in range(5)]
            b.leave(slot)
            assert got == answer and kv.ids == ids + answer[:-1]  # the last token was never fed
            assert kv.reusable(turn2) == len(ids) + 5
            slot, first = b.join(turn2, None, kv)
            got = [first] + [b.step()[slot] for _ in range(4)]
            b.begin(more, None, kv)
            b.leave(slot)
            assert kv.ids == [] and b.advance(rows=8) is not None and kv.ids == more
    assert got == want


def test_smollm2_greedy_batch_equals_alone(device):
    m = load_smollm2(ctx=128)
    ps = [list(range(20, 20 + n)) for n in (9, 4, 15)]
    with build(device, m, "fused") as dec:
        want = [alone(dec, p, 6) for p in ps]
        with BatchDecode(dec, (1, 2, 4)) as b:
            assert batched(b, ps, [6] * 3) == want


def test_slots_that_cannot_fit_are_refused(device, tiny, monkeypatch):
    from vkdecode.errors import DeviceMemoryError

    m = tiny["llama"]
    with build(device, m, "fused") as dec:
        need = dec.executor.plan.total_bytes
        monkeypatch.setattr(type(device.info), "device_local_bytes", property(lambda self: need + 1))
        with pytest.raises(DeviceMemoryError, match="a batch of 8 sequences needs"):
            BatchDecode(dec, (1, 8))


@pytest.mark.parametrize("solo,ahead", [(False, False), (True, False), (True, True)])
def test_each_slot_keeps_its_chat_for_the_next_turn(device, tiny, solo, ahead):
    """Two chats interleaved: each leaves its rows in its slot, so each second turn takes that slot
    and runs only its new tokens (the decoder's cache held the other chat), giving the tokens it
    gives alone; a third prompt unrelated to both takes the empty slot, evicting neither."""
    from vkdecode.prompt_cache import KVPrefix

    m = tiny["llama"]
    a, b_ids, more, other = prompts((9, 7, 4, 6), seed=6)
    with build(device, m, "fused") as dec:
        answers = [alone(dec, ids, 6) for ids in (a, b_ids)]
        turn2 = [ids + ans + more for ids, ans in zip((a, b_ids), answers)]
        want = [alone(dec, t, 4) for t in turn2]
        kv = KVPrefix()
        with BatchDecode(dec, (1, 2, 4), solo=solo, pipelined=ahead) as b:
            firsts = [b.join(ids, None, kv) for ids in (a, b_ids)]
            got = {s: [t] for s, t in firsts}
            for _ in range(5):
                for s, t in b.step().items():
                    got[s].append(t)
            for s, _ in firsts:
                b.leave(s)
            assert [got[s] for s, _ in firsts] == answers
            slot, _ = b.join(other, None, kv)
            assert slot not in (firsts[0][0], firsts[1][0]) and b.joining is None
            b.leave(slot)
            out = {}
            for i, t in enumerate(turn2):
                s = b.begin(t, None, kv)
                assert s == firsts[i][0] and b.joining.cached == len(t) - len(more) - 1
                while (joined := b.advance(rows=8)) is None:
                    pass
                out[s] = [joined[1]]
            for _ in range(3):
                for s, t in b.step().items():
                    out[s].append(t)
    assert [out[s] for s, _ in firsts] == want


@pytest.mark.parametrize("solo", [False, True])
def test_joins_keep_the_decoders_stats_to_one_prompt(device, tiny, solo):
    """A server joins prompts without end (issue 34's soak crept ~0.5 MiB a minute): the decoder's
    per-chunk and per-step stats hold the last prompt's (as Decoder.clear_stats keeps them to one
    generation's), not a record of every prompt that ever joined."""
    m = tiny["llama"]
    (ids,) = prompts((20,), seed=7)  # two 8-row chunks and three decode steps on lavapipe
    with build(device, m, "fused") as dec, BatchDecode(dec, (1, 2), solo=solo) as b:
        chunks = sum(p.rows > 1 for p in dec.prompt_pieces(ids))
        assert chunks >= 2
        for _ in range(40):
            slot, _ = b.join(ids, None)
            b.step()
            b.leave(slot)
        assert len(dec.prefill.chunks) == chunks
        assert len(dec.executor.token_stats) <= len(ids) + 2


def test_steps_ahead_keep_the_step_records_bounded(device, tiny):
    """A server steps without end, its sequences joining and leaving at different times, so every
    step after the first is collected ahead: their records are trimmed like the others (a 10-minute
    lavapipe soak grew ~2.7 MiB a minute while they were not)."""
    m = tiny["llama"]
    ps = prompts((4, 5, 6, 3), seed=2)
    with build(device, m, "fused") as dec, BatchDecode(dec, (4,), pipelined=True) as b:
        for p in ps[:3]:  # staggered: the rows reach the end of the context at different steps
            b.join(p, None)
            for _ in range(9):
                b.step()
        n = 0
        while b.ahead.collected < 1100:
            b.step()
            for s in [s for s in b.rows if b.rows[s].pos >= CTX - 2]:  # before the end: sent ahead
                b.leave(s)
                b.join(ps[n % 4], None)
                n += 1
        assert b.ahead.partial > 10 and len(b.runners[4].token_stats) <= 1024


@pytest.mark.parametrize("mode", ["fused", "replay-nofuse"])
def test_fused_steps_take_each_rows_residual_add_and_norm_in_one_kernel(device, tiny, mode):
    """fusion.rules.BATCH_RULES: in the fused mode every residual add of a batched step and the norm
    after it are one add_rms_norm dispatch over the rows (two a layer); other modes keep both ops."""
    m = tiny["qwen3"]
    layers = sum(op.kind == "attention" for op in m.program.ops)
    with build(device, m, mode) as dec, BatchDecode(dec, (1, 4)) as b:
        for w, runner in b.runners.items():
            fused = [r for r in runner.regions if r.rule == "ADD_RMS_NORM_ROWS"]
            kernels = [it.call.shader for it in runner.items].count("add_rms_norm")
            assert len(fused) == kernels == (2 * layers if mode == "fused" else 0), (w, len(fused), kernels)
        got = batched(b, prompts((4, 6, 9)), [5, 3, 4])
        want = [alone(dec, p, n) for p, n in zip(prompts((4, 6, 9)), [5, 3, 4])]
    assert got == want

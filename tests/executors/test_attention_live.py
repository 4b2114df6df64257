"""Split-K attention sized to the position, not to --ctx (KernelCall.live, executors/plan.py
GridArgs, shaders/attn_live.glsl): a long context's grid runs only the splits with rows, dispatched
indirectly with group counts the host writes with the position and each step's last dispatch
writes for the next. Every mode equals the reference at every position, also after a longer
sequence left its partials in the splits a short one does not run, pipelined, K steps per submit,
after prompt chunks and speculative verify steps, with no host work per token in replay."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import tiny_hf_model
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.executors.plan import GRID_ARGS, GridArgs
from vkdecode.lowering.calls import AttnGrid, KernelCall, KernelCaps, live_splits
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

CTX = 72
CHUNK = 4  # attn_max_chunk: 18 splits at full context (gemma3's window of 6: 2), one live below 4
# lavapipe's defaults keep the combine dispatch (cx_rows -1) and one split at least; GPUs combine in
# the o-projection (absorbed) and keep 4 splits at least (gpu: live 4..16, MAX_SPLITS; gpu-fixed: a grid of 4
# that never narrows, the o-projection's combine folded to a constant split count)
TUNING = {
    "fused": {},
    "fused-absorbed": {"cx_rows": 0},
    "fused-gpu": {"cx_rows": 0, "attn_splits": 4},
    "fused-gpu-fixed": {"cx_rows": 0, "attn_splits": 4, "attn_max_chunk": 256},
    # rows per live split below the grid's MAXCHUNK (GPUs at a long context: live_rows):
    # 9 splits of at most 8 rows, live ceil(rows / 3) of them, 4 at least
    "fused-gpu-live": {"cx_rows": 0, "attn_splits": 4, "attn_max_chunk": 8, "attn_live_rows": 3},
    "replay-nofuse": {},
    "unfused": {},
}
MODES = list(TUNING)


def _caps(device, mode: str) -> KernelCaps:
    return KernelCaps.from_info(device.info, **{"attn_max_chunk": CHUNK, **TUNING[mode]})


def _executor(device, m, mode: str, **kw):
    return make_executor(
        mode.split("-")[0] if mode.startswith("fused") else mode,
        device,
        m.program,
        m.weights,
        caps=_caps(device, mode),
        **kw,
    )


@pytest.fixture(scope="module")
def tiny(models_dir):
    # gemma3: a sliding window of 6 on layer 0 (its own grid: fewer rows, fewer splits), global layer 1
    return {a: load_model(tiny_hf_model(a, models_dir), ctx=CTX) for a in ("llama", "gemma3")}


def test_live_splits_cover_the_rows_within_the_grid():
    """No GPU: at every position the live splits hold every visible row, at most maxchunk each
    (the shaders' shared arrays), never more than the grid, at least min_s where the grid has them."""
    for s, maxchunk, min_s, window, ctx in [
        (16, 256, 1, 0, 4096),
        (32, 256, 4, 0, 8192),
        (4, 3, 4, 0, 10),
        (3, 2, 1, 6, 64),
        (5, 1, 8, 0, 5),
        (9, 8, 2, 0, 72),
    ]:
        grid = AttnGrid(4, 64, s, maxchunk, min_s, window)
        for pos in range(ctx):
            rows = min(pos + 1, window) if window else pos + 1
            live = live_splits(pos, grid)
            assert min(min_s, s) <= live <= s
            assert -(-rows // live) <= maxchunk, (grid, pos)
            assert live == max(min(min_s, s), -(-rows // maxchunk))  # no more than the rows need
    assert live_splits(16, AttnGrid(9, 64, 16, 256, 1, 0)) == 1  # SmolLM2 ctx 4096 on lavapipe
    assert live_splits(16, AttnGrid(9, 64, 32, 256, 4, 0)) == 4  # ctx 8192 on a GPU: as at ctx 192


def test_grid_records_one_per_distinct_grid():
    """No GPU: calls sharing a grid share a record; (x, y) at a position, prefetch rows kept whole."""
    g1, g2 = AttnGrid(4, 64, 12, 8, 1, 0), AttnGrid(4, 64, 3, 2, 1, 6)
    calls = [
        KernelCall("a", (), (), (), (12, 4, 1), live=g1),
        KernelCall("b", (), (), (), (1, 1, 1)),
        KernelCall("a", (), (), (), (3, 4, 1), live=g2),
        KernelCall("a", (), (), (), (12, 4, 1), live=g1),
        KernelCall("a", (), (), (), (12, 7, 1), defines=(("PF_G", "36"),), live=g1),
    ]
    grids = GridArgs(calls)
    assert grids.index == [0, None, 1, 0, 2] and len(grids) == 3
    assert grids.args(0) == [1, 4, 1, 1, 4, 1, 1, 4 + 36, 1]
    assert grids.args(40) == [6, 4, 1, 3, 4, 1, 6, 4 + 6, 1]  # 41 rows / 8; window 6 / 2
    assert len(grids.initial_words()) == 3 * GridArgs.RECORD_WORDS


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
@pytest.mark.parametrize("mode", MODES)
def test_every_position_and_a_shorter_sequence_after_a_longer(device, tiny, arch, mode):
    """Positions 0..CTX-1 (live splits 1..18) against the reference, then a new sequence from 0:
    the splits it does not run still hold the first one's partials, which nothing may read."""
    m = tiny[arch]
    ref = Reference(m.program, m.weights)
    with Decoder(_executor(device, m, mode)) as dec:
        ex = dec.executor
        live = [it for it in ex.items if it.grid is not None]
        assert bool(live) != (mode == "fused-gpu-fixed")
        assert all(it.call.groups[0] == it.call.live.s > it.call.live.min_s for it in live)
        if mode == "fused-gpu-live" and arch == "llama":  # the kernel divides by 3, not MAXCHUNK 8
            assert all(("LIVE_ROWS", "3") in it.call.defines for it in live)
        if (
            mode.startswith("fused-") and arch == "llama"
        ):  # the o-projection combines (gemma's is no MATMUL_ADD)
            assert any(("COMBINE_X", "1") in it.call.defines for it in ex.items)
        long = greedy_against_reference(ex, ref, CTX)[0]
        short = greedy_against_reference(ex, ref, 12, first=3)[0]
    assert long and short


@pytest.mark.parametrize("mode", ["fused", "fused-absorbed", "fused-gpu-live", "replay-nofuse"])
def test_the_gpu_sizes_the_next_grids_as_the_host_would(device, tiny, mode):
    """After each replayed step the step's last dispatch has written the next position's (x, y, z)
    of every grid record, equal to GridArgs.args (the host's copy of attn_live.glsl); steady state
    has no descriptor write, recording or recorded command, and one submit."""
    m = tiny["gemma3"]
    with Decoder(_executor(device, m, mode)) as dec:
        ex = dec.executor
        s = ex.plan.slices[(GRID_ARGS, "data")]
        n = len(ex.grids)
        # one record per distinct indirect grid; with lavapipe's caps the sliding-window layer's grid
        # and the global one's (gpu-live: the window of 6 fits the 4 splits it keeps at least, so
        # that grid never narrows and is dispatched directly, as with a GPU's caps)
        assert n == len({it.call.live for it in ex.items if it.grid is not None}) >= 1
        if ex.caps.device_cpu:
            assert n == (1 if mode == "fused-gpu-live" else 2)
        tok = 7
        for pos in range(CTX - 1):
            tok = ex.step(tok, pos)
            words = s.read_array("uint32", n * GridArgs.RECORD_WORDS).reshape(n, -1)
            assert words[:, :3].ravel().tolist() == ex.grids.args(pos + 1), pos
        for st in ex.token_stats[1:]:
            c = st.counters
            assert (
                c.descriptor_writes,
                c.descriptor_set_allocations,
                c.command_buffer_recordings,
                c.recorded_commands,
                c.submits,
            ) == (0, 0, 0, 0, 1)


@pytest.mark.parametrize("k", [1, 4])
def test_pipelined_decode_k_steps_per_submit(device, tiny, k):
    """Pipelined decode (the GPU feeds each step its position and grids) equals step by step."""
    m = tiny["llama"]
    with Decoder(_executor(device, m, "fused")) as dec:
        ex = dec.executor
        want, tok = [], 5
        for pos in range(CTX):
            tok = ex.step(tok, pos)
            want.append(tok)
    with Decoder(_executor(device, m, "fused", tokens_per_submit=k)) as dec:
        ex = dec.executor
        first = ex.step(5, 0)
        assert [first] + list(ex.decode(first, 1, CTX)) == want


@pytest.mark.parametrize("mode", ["fused", "unfused"])
def test_after_prompt_chunks_and_speculative_steps(device, tiny, mode):
    """Prompt chunks (no live grids: the host sets the decode step's grids with the position),
    then pipelined decode, then speculative verify steps: the reference's greedy tokens."""
    m = tiny["llama"]
    ref = Reference(m.program, m.weights, dtype=np.float64)
    prompt = [int(t) for t in np.random.default_rng(1).integers(3, 250, 30)]
    want = None
    for p, t in enumerate(prompt):
        want = int(ref.step(t, p)["next_token"][0])
    cont = [want]
    for p in range(len(prompt), CTX - 1):
        cont.append(int(ref.step(cont[-1], p)["next_token"][0]))
    with Decoder(_executor(device, m, mode)) as dec:
        ex = dec.executor
        dec.set_prefill((16, 4))
        nxt = dec.run_prompt(prompt, 0)
        assert nxt == want
        assert [nxt] + list(ex.decode(nxt, len(prompt), 12))[:11] == cont[:12]
        dec.set_speculative(3)
        nxt = dec.run_prompt(prompt, 0)
        got = [nxt] + list(dec.speculative.run(prompt, nxt, len(prompt), CTX - 1 - len(prompt)))
        assert got == cont, (got, cont)


def test_gpu_live_splits_keep_the_short_context_split_size():
    """fused_attention.live_rows: GPUs divide a position's rows by the split size tuned at ctx 256
    (capped by the grid's MAXCHUNK); CPUs by MAXCHUNK (the fewest splits)."""
    from dataclasses import replace as dc_replace

    from vkdecode.lowering.attention import attention_grid, live_rows

    gpu = KernelCaps(
        subgroup_size=32,
        subgroup_arithmetic=True,
        max_storage_range=1 << 30,
        max_invocations=1024,
        max_shared=49152,
        min_align=64,
    )
    s, maxchunk, min_s = attention_grid(8192, 64, gpu)
    # at most MAX_SPLITS (16) splits: 64 rows each up to position 1023, then 512 at most
    assert (s, maxchunk, min_s) == (16, 512, 4) and live_rows(maxchunk, min_s, gpu) == 64
    assert live_splits(1000, AttnGrid(9, 64, s, live_rows(maxchunk, min_s, gpu), min_s, 0)) == 16
    assert attention_grid(256, 64, gpu) == (4, 64, 4)  # ctx 256: unchanged grid
    assert live_rows(*attention_grid(256, 64, gpu)[1:], gpu) == 64
    assert live_rows(*attention_grid(8192, 128, gpu)[1:], gpu) == 64  # head_dim 128: 4 splits at least
    assert live_rows(*attention_grid(8192, 256, gpu)[1:], gpu) == 256  # head_dim 256: 1 split at least
    assert attention_grid(8192, 128, dc_replace(gpu, attn_max_splits=4)) == (4, 2048, 4)
    cpu = dc_replace(gpu, attn_live_rows=-1)
    assert live_rows(maxchunk, min_s, cpu) == maxchunk


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_gpu_caps_two_contexts_same_tokens_as_the_reference(device, models_dir, arch):
    """GPU-style caps (absorbed combine, live splits of 3 rows, 2 at least, 12 at most: the combine
    in batches of 8, two of them from position 24) at ctx 24 and 72: every position of each equals
    the reference, and the shorter context's positions run the very grids the longer one runs."""
    caps = KernelCaps.from_info(device.info, cx_rows=0, attn_splits=2, attn_live_rows=3, attn_max_splits=12)
    runs = {}
    for ctx in (24, 72):
        m = load_model(tiny_hf_model(arch, models_dir), ctx=ctx)
        with Decoder(make_executor("fused", device, m.program, m.weights, caps=caps)) as dec:
            ex = dec.executor
            assert ex.grids.records and all(r[1] == 3 for r in ex.grids.records)  # rows per live split
            if arch == "llama":
                assert any(("COMBINE_X", "1") in it.call.defines for it in ex.items)
            grids = [ex.grids.args(pos) for pos in range(24)]
            runs[ctx] = (greedy_against_reference(ex, Reference(m.program, m.weights), ctx)[0], grids)
    assert runs[24][0] == runs[72][0][:24] and runs[24][1] == runs[72][1]

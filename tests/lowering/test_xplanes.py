"""x planes of a batched step (lowering/xplanes.py, caps.xplanes): where they apply, written once
by each producer whose value a matvec reads as planes, and a whole batched step's logits
bit-identical with and without them (split wide units on integer dot products forced on lavapipe,
which has them). The matvec itself against numpy: test_ops_matmul_batch.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.executors.test_batch import CTX, build, prompts
from tests.helpers.make_models import tiny_hf_model, write_gguf
from tests.lowering.test_ops_matmul_batch import _case
from vkdecode.executors.batch import BatchDecode
from vkdecode.lowering.caps import KernelCaps
from vkdecode.lowering.ops import op_calls
from vkdecode.models.loader import load_model

GPU = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, integer_dot=True, integer_dot_fast=True)


def _shaders(caps, xr, dtype="q4_k"):
    return [c.shader for c in op_calls(_case(dtype, xr, 4096, 4096, lazy=True)[0], 0, caps)]


def test_knob_and_where_it_applies():
    """caps.xplanes: 0 every batched width, > 0 widths from it, < 0 none; never the single-row
    decode's matmul, whole wide units (a CPU's default) or float kernels (kq_idot < 0)."""
    assert _shaders(GPU, 1) == ["matmul"]  # no attr batch: the decode step's
    assert _shaders(GPU, 2) == _shaders(GPU, 8, "q6_k") == ["xplanes", "matmul"]
    assert _shaders(replace(GPU, xplanes=-1), 4) == ["matmul"]
    assert _shaders(replace(GPU, xplanes=4), 2) == ["matmul"]
    assert _shaders(replace(GPU, xplanes=4), 4) == ["xplanes", "matmul"]
    assert _shaders(replace(GPU, kq_idot=-1), 4) == _shaders(replace(GPU, kw_split=-1), 4) == ["matmul"]
    assert _shaders(replace(GPU, kq_idot_q6=-1), 4, "q6_k") == ["matmul"]
    assert _shaders(replace(GPU, batch_matvec=-1), 4)[0] != "xplanes"  # the chunk kernels


def _steps(device, m, caps, ps, n):
    """Each step's logits of its live rows of a batch of ps, every sequence leaving after n tokens,
    and the widest runner's calls. Not the padding rows: with the fused attention (FUSED in
    attention_rows.comp) they read their padding slot's rows that other padding rows write in the
    same step, a race whose outputs nobody reads (an H200 gave other bits each run)."""
    logits = []
    with build(device, m, "fused", caps) as dec, BatchDecode(dec, (1, 2, 4, 8)) as b:
        calls, prog = [it.call for it in b.runners[8].items], b.runners[8].program
        slots = [b.join(ids, None)[0] for ids in ps]
        for k in range(n + len(ps)):
            for s in slots[: max(0, k - n + 1)]:  # one leaves each step past n: widths 8 .. 1
                if s in b.rows:
                    b.leave(s)
            if not b.rows:
                break
            live, w = len(b.rows), b.width()
            b.step()
            logits.append(b.runners[w].read_logits().reshape(w, -1)[:live].copy())
        assert all(b.steps[w] > 0 for w in (8, 4, 2, 1)), b.steps
    return logits, calls, prog


@pytest.mark.parametrize("fused_attn", [-1, 1])
@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
def test_batched_step_logits_bit_identical(device, models_dir, dtype, fused_attn):
    """A batched step's logits at widths 8, 4, 2 and 1 with x planes made once a step (xplanes 0;
    the norms' rows over 4 workgroups each) and per unit (< 0) are the same bits: the same kw_planes
    / kw_xsum arithmetic. The batched attention apart (rope_rows, kv_write_rows, attention_rows)
    and fused (one attention_rows: its region's output gets an xplanes call too, regions.py)."""
    on = KernelCaps.from_info(
        device.info, kwide=1, kw_split=1, kq_idot=1, matvec_wg=0, matvec_rows=0, norm_parts=4
    )
    on = replace(on, attn_rows_fused=fused_attn)  # the attention output's planes after either form
    if not on.integer_dot:
        pytest.skip("no shaderIntegerDotProduct on this device")
    # 16 heads of 16: the o projection's rows are 256 wide, whole superblocks (not q5_0's fallback)
    hf = tiny_hf_model("qwen2", models_dir, hidden_size=256, intermediate_size=512, num_attention_heads=16)
    m = load_model(write_gguf(hf, models_dir / f"xplanes-qwen2-256.{dtype}.gguf", dtype), ctx=CTX)
    assert {v.dtype for v in m.program.values.values() if v.kind == "weight" and len(v.shape) == 2} >= {dtype}
    ps = prompts((7, 3, 12, 5, 9))
    got, calls, prog = _steps(device, m, on, ps, 3)
    want, plain, _ = _steps(device, m, replace(on, xplanes=-1), ps, 3)
    # each x read as planes written once: by its norm or silu_mul (XPLANES), the attention output's
    # by an xplanes call; none without
    mm = [c for c in calls if c.shader == "matmul"]
    xs = {c.bindings[2].value for c in mm if "KW_XPLANES" in dict(c.defines)}
    folded = [c for c in calls if "XPLANES" in dict(c.defines)]
    apart = [c.bindings[0].value for c in calls if c.shader == "xplanes"]
    outs = [c.bindings[4 if c.shader == "add_rms_norm" else 2].value for c in folded]
    assert sorted(apart + outs) == sorted(xs)
    # layer 0's norm has no add before it; each later one its residual add (ADD_RMS_NORM_ROWS)
    assert {c.shader for c in folded} == {"rms_norm", "add_rms_norm", "silu_mul"}
    made_by = {out: op.kind for op in prog.ops for out in op.outputs}
    assert apart and {made_by[x] for x in apart} == {"attention"}
    assert not any(c.shader == "xplanes" or "XPLANES" in dict(c.defines) for c in plain)
    assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("dtype", ["q4_k", "f16"])
def test_fused_add_norm_rows_write_the_planes(models_dir, dtype):
    """No GPU: a batched step's ADD_RMS_NORM_ROWS regions run one add_rms_norm over the rows, which
    also writes the planes (XPLANES) where the normed rows go to matvecs reading them, each row
    over xplanes.norm_parts workgroups (one on CPUs)."""
    from fusion.chunk_batch import batch_program
    from fusion.partition import partition
    from fusion.rules import BATCH_RULES
    from vkdecode.lowering.regions import region_calls
    from vkdecode.lowering.xplanes import norm_parts

    hf = tiny_hf_model("qwen2", models_dir, hidden_size=256, intermediate_size=512, num_attention_heads=16)
    m = load_model(write_gguf(hf, models_dir / f"xplanes-qwen2-256.{dtype}.gguf", dtype), ctx=CTX)
    prog = batch_program(m.program, 4, 4)
    caps = replace(GPU, kwide=1, kw_split=1, kq_idot=1)
    fused = [r for r in partition(prog, list(BATCH_RULES)) if r.rule == "ADD_RMS_NORM_ROWS"]
    assert len(fused) == 2 * sum(op.kind == "attention" for op in prog.ops)
    planes = dtype == "q4_k"
    for r in fused:
        (c,) = region_calls(prog, r, caps)
        assert c.shader == "add_rms_norm" and ("XPLANES" in dict(c.defines)) == planes
        assert c.groups[0] == 4 * (norm_parts(256, caps) if planes else 1)
    assert norm_parts(256, caps) == 1 and norm_parts(4096, caps) == 16
    assert (
        norm_parts(4096, replace(caps, device_cpu=True)) == 1
        and norm_parts(4096, replace(caps, norm_parts=4)) == 4
    )

"""Qwen3.5's linear-attention kernels (conv1d_step, gated_delta_step) against the float64
reference, state included: from a filled state at a later position, and at position 0 over a
state of NaNs (an earlier sequence's, which must read as zeros); a batched step's rows, each on its
own slot's copy of the state at its own position, the copies no row steps left as they were."""

import dataclasses

import numpy as np
import pytest

from fusion.ir import STEP_LIVE
from tests.lowering.kernel_harness import batch_step, caps_of, nmse, one_op, run_and_reference, step
from vkdecode.lowering import linear_attention
from vkdecode.lowering.linear_attention import gated_delta_step
from vkdecode.quant import PackedWeight

LIMIT = 1e-10  # f32 sums against float64: nmse


def f32(a) -> np.ndarray:
    return np.asarray(a, np.float32)


CONV_CASES = [
    (40, 4, 0, 1),
    (40, 4, 1, 1),
    (300, 4, 9, 1),
    (33, 3, 5, 1),
    (40, 4, 2, 5),
    (24, 4, 0, 2),
    (72, 4, 7, 37),  # more rows than a GPU's 8 lanes a channel, not a multiple; a part-filled group
]


def conv_case(rng, c: int, k: int, rows: int, state, steps, **attrs):
    """A conv1d_step program of `rows` rows over the history `state` (one, or a batched step's
    copies: attr batch) and its inputs, `steps` the step buffer (a batched step's: a record a row)."""
    step_name = "batch_step" if attrs.get("batch") else "step"  # verify: "step" is one record
    p = one_op(
        "conv1d_step",
        {
            "x": ((rows * c,), "f32", "activation"),
            "w": ((c * k,), "f32", "weight"),
            step_name: ((steps.size,), "u32", "step"),
        },
        {"y": ((rows * c,), "f32", "output"), "hist": ((state.size,), "f32", "state")},
        kernel=k,
        **({"rows": rows} if rows > 1 else {}),
        **attrs,
    )
    env = {
        "x": f32(rng.standard_normal(rows * c)),
        "w": PackedWeight("f32", (c * k,), {"data": f32(rng.standard_normal(c * k))}),
        "hist": f32(state),
        step_name: steps,
    }
    return p, env


@pytest.mark.parametrize("gpu_lanes", [False, True], ids=["own-caps", "gpu-lanes"])
@pytest.mark.parametrize("c,k,pos,rows", CONV_CASES)
def test_conv1d_step(device, c, k, pos, rows, gpu_lanes):
    """rows > 1: a prompt chunk's rows (fewer rows than the history: 2 of 3 kept); gpu_lanes: split
    over a channel's lanes as on a GPU (lavapipe's own caps walk them in order, a lane a channel)."""
    rng = np.random.default_rng(c + k + pos + rows)
    hist = rng.standard_normal((k - 1) * c)
    if pos == 0:
        hist[:] = np.nan  # nothing before position 0 is read
    p, env = conv_case(rng, c, k, rows, hist, step(0, pos))
    caps = caps_of(device)
    caps = dataclasses.replace(caps, device_cpu=caps.device_cpu and not gpu_lanes)
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["y"], want["y"]) <= LIMIT
    # the newest inputs over the oldest ones, the rest kept
    np.testing.assert_array_equal(got["hist"], want["hist"].astype(np.float32))


def delta_case(rng, heads: tuple, rows: int, state, steps, **attrs):
    """A gated_delta_step program of `rows` rows over the state `state` (one, or a batched step's
    copies: attr batch) and its inputs, `steps` the step buffer (a batched step's: a record a row)."""
    hk, hv, dk, dv = heads
    c = 2 * hk * dk + hv * dv
    step_name = "batch_step" if attrs.get("batch") else "step"  # verify: "step" is one record
    p = one_op(
        "gated_delta_step",
        {
            "qkv": ((rows * c,), "f32", "activation"),
            "ga": ((rows * hv,), "f32", "activation"),
            "gb": ((rows * hv,), "f32", "activation"),
            "a_log": ((hv,), "f32", "weight"),
            "dt_bias": ((hv,), "f32", "weight"),
            step_name: ((steps.size,), "u32", "step"),
        },
        {"o": ((rows * hv * dv,), "f32", "output"), "s": ((state.size,), "f32", "state")},
        n_k_heads=hk,
        n_v_heads=hv,
        k_dim=dk,
        v_dim=dv,
        **({"rows": rows} if rows > 1 else {}),
        **attrs,
    )
    ga = rng.standard_normal(rows * hv) * 3
    ga[0] = 30.0  # softplus's linear branch
    env = {
        "qkv": f32(rng.standard_normal(rows * c)),
        "ga": f32(ga),
        "gb": f32(rng.standard_normal(rows * hv)),
        "a_log": PackedWeight("f32", (hv,), {"data": f32(rng.uniform(-1, 1, hv))}),
        "dt_bias": PackedWeight("f32", (hv,), {"data": f32(rng.uniform(-1, 1, hv))}),
        "s": f32(state),
        step_name: steps,
    }
    return p, env


@pytest.mark.parametrize("rowwise", [0, 1])
@pytest.mark.parametrize("gpu_lanes", [0, 1])
@pytest.mark.parametrize("tiled", [0, 1])
@pytest.mark.parametrize(
    "hk,hv,dk,dv,pos,rows",
    [
        (2, 4, 16, 16, 3, 1),
        (2, 4, 16, 16, 0, 1),
        (1, 1, 128, 128, 7, 1),
        (2, 6, 32, 24, 1, 1),
        (4, 8, 128, 200, 2, 1),
        (2, 4, 16, 16, 0, 6),
        (2, 6, 32, 24, 5, 3),
        (2, 6, 32, 24, 5, 40),  # blocks of 16, 16 and 8 rows (gated_delta_chunk)
        (1, 2, 128, 128, 0, 20),
    ],
)
def test_gated_delta_step(device, hk, hv, dk, dv, pos, rows, tiled, gpu_lanes, rowwise):
    """rows > 1: a prompt chunk's rows in order, the state carried from row to row. tiled: the V
    heads in llama.cpp's GGUF order (V head h reads key head h % hk). gpu_lanes: the GPU's launch
    (several lanes a state column, their sums through shared memory) on any device, lavapipe's
    one lane a column included. rowwise: a chunk's rows one by one (caps delta_block < 0, a CPU's
    default), else in blocks of 16 (a GPU's default, gated_delta_chunk.comp)."""
    rng = np.random.default_rng(hk * hv + dk + dv + pos + rows)
    s = rng.standard_normal(hv * dk * dv) * 0.3
    if pos == 0:
        s[:] = np.nan
    p, env = delta_case(rng, (hk, hv, dk, dv), rows, s, step(0, pos), **({"v_tiled": 1} if tiled else {}))
    caps = caps_of(device)
    caps = dataclasses.replace(
        caps, device_cpu=caps.device_cpu and not gpu_lanes, delta_block=-1 if rowwise else 16
    )
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["o"], want["o"]) <= LIMIT
    assert nmse(got["s"], want["s"]) <= LIMIT


def test_delta_block_must_be_a_power_of_two(device):
    p = one_op(
        "gated_delta_step",
        {
            "qkv": ((2 * 64,), "f32", "activation"),
            "ga": ((2 * 2,), "f32", "activation"),
            "gb": ((2 * 2,), "f32", "activation"),
            "a_log": ((2,), "f32", "weight"),
            "dt_bias": ((2,), "f32", "weight"),
            "step": ((8,), "u32", "step"),
        },
        {"o": ((2 * 2 * 16,), "f32", "output"), "s": ((2 * 16 * 16,), "f32", "state")},
        n_k_heads=1,
        n_v_heads=2,
        k_dim=16,
        v_dim=16,
        rows=2,
    )
    caps = dataclasses.replace(caps_of(device), delta_block=12)
    with pytest.raises(ValueError, match="delta_block 12: a power of two"):
        gated_delta_step(p, p.ops[0], caps)


def test_delta_block_default_by_device(device):
    """caps delta_block 0: a GPU's chunks in blocks (DELTA_BLOCK_GPU rows), a CPU's row by row; a
    chunk narrower than the block takes the power of two that holds it."""
    caps = caps_of(device)
    p, _ = delta_case(np.random.default_rng(0), (1, 2, 16, 16), 5, np.zeros(2 * 16 * 16), step(0, 0))
    gpu = gated_delta_step(p, p.ops[0], dataclasses.replace(caps, device_cpu=False, delta_block=0))
    cpu = gated_delta_step(p, p.ops[0], dataclasses.replace(caps, device_cpu=True, delta_block=0))
    assert [c.shader for c in gpu] == ["gated_delta_chunk"] and gpu[0].spec[-1] == 8
    assert [c.shader for c in cpu] == ["gated_delta_step"]


# A batched step (fusion/chunk_batch.py): rows at their own positions and slots, not in slot order;
# row 1 starts a sequence (position 0) over a slot of NaNs (the earlier sequence's, read as zeros)
B_POS, B_SLOTS, B_COPIES = [5, 0, 2], [3, 0, 2], 5  # 4 slots and the padding rows' copy


def batched_states(rng, per: int) -> np.ndarray:
    """B_COPIES states of `per` floats: the copies no row steps (1 and 4) must come back as they were."""
    s = rng.standard_normal((B_COPIES, per)) * 0.3
    s[B_SLOTS[B_POS.index(0)]] = np.nan
    return f32(s.reshape(-1))


def untouched(got: np.ndarray, before: np.ndarray, per: int) -> None:
    for c in set(range(B_COPIES)) - set(B_SLOTS):
        np.testing.assert_array_equal(got.reshape(B_COPIES, per)[c], before.reshape(B_COPIES, per)[c])


@pytest.mark.parametrize("c,k", [(40, 4), (33, 3), (300, 4)])
def test_batched_conv1d_step(device, c, k):
    """Each row one token on its slot's history; the rows side by side (BATCH)."""
    rng = np.random.default_rng(c + k)
    hist = batched_states(rng, (k - 1) * c)
    p, env = conv_case(rng, c, k, len(B_POS), hist, batch_step(B_POS, B_SLOTS), batch=True)
    got, want = run_and_reference(device, p, env, caps_of(device))
    assert nmse(got["y"], want["y"]) <= LIMIT
    np.testing.assert_array_equal(got["hist"], want["hist"].astype(np.float32))
    untouched(got["hist"], hist, (k - 1) * c)


@pytest.mark.parametrize("gpu_lanes", [0, 1])
@pytest.mark.parametrize("hk,hv,dk,dv,tiled", [(2, 4, 16, 16, 0), (2, 6, 32, 24, 1), (1, 2, 128, 72, 0)])
def test_batched_gated_delta_step(device, hk, hv, dk, dv, tiled, gpu_lanes):
    """Each row one token on its slot's state (the last shape: 3 column blocks a head), the rows
    side by side (BATCH), never the chunk's blocks (caps delta_block set)."""
    rng = np.random.default_rng(hk * hv + dk + dv)
    s = batched_states(rng, hv * dk * dv)
    tiled = {"v_tiled": 1} if tiled else {}
    p, env = delta_case(rng, (hk, hv, dk, dv), len(B_POS), s, batch_step(B_POS, B_SLOTS), batch=True, **tiled)
    caps = caps_of(device)
    caps = dataclasses.replace(caps, device_cpu=caps.device_cpu and not gpu_lanes, delta_block=16)
    assert gated_delta_step(p, p.ops[0], caps)[0].shader == "gated_delta_step"
    got, want = run_and_reference(device, p, env, caps)
    assert nmse(got["o"], want["o"]) <= LIMIT
    assert nmse(got["s"], want["s"]) <= LIMIT
    untouched(got["s"], s, hv * dk * dv)


def test_conv1d_chunk_launch_on_a_gpu(device):
    """A 512-row chunk at Qwen3.5-35B-A3B's 8,192 channels: 8 lanes a channel, 32 channels a
    workgroup (256 workgroups); a CPU's, a lane a channel; a decode step's row, a lane a channel."""
    caps = caps_of(device)
    gpu, cpu = dataclasses.replace(caps, device_cpu=False), dataclasses.replace(caps, device_cpu=True)
    hist = np.zeros(3 * 8192)
    p, _ = conv_case(np.random.default_rng(0), 8192, 4, 512, hist, step(0, 0))
    (g,) = linear_attention.conv1d_step(p, p.ops[0], gpu)
    assert g.spec == (256, 8192, 4, 512, 8) and g.groups == (256, 1, 1)
    (c,) = linear_attention.conv1d_step(p, p.ops[0], cpu)
    assert c.spec[4] == 1 and c.groups[0] * c.spec[0] >= 8192
    p1, _ = conv_case(np.random.default_rng(0), 8192, 4, 1, hist, step(0, 5))
    (d,) = linear_attention.conv1d_step(p1, p1.ops[0], gpu)
    assert d.spec == (128, 8192, 4, 1, 1) and d.groups == (64, 1, 1)


@pytest.mark.parametrize("gpu_lanes", [False, True], ids=["own-caps", "gpu-lanes"])
@pytest.mark.parametrize(
    "kind,live", [("conv", 2), ("conv", 13), ("rows", 13), ("blocks", 13), ("blocks", 3)]
)
def test_a_padded_chunk_steps_its_prompt_rows_only(device, kind, live, gpu_lanes):
    """A prompt chunk of 16 rows holding `live` prompt tokens (its step's STEP_LIVE): the state
    steps through those rows only and the rest of the output is zero (executors/prefill.py pads
    the last chunk; a padding row would otherwise stay in the state)."""
    rng = np.random.default_rng(live)
    s = step(0, 5)
    s[STEP_LIVE] = live
    caps = caps_of(device)
    caps = dataclasses.replace(
        caps, device_cpu=caps.device_cpu and not gpu_lanes, delta_block=16 if kind == "blocks" else -1
    )
    if kind == "conv":
        p, env = conv_case(rng, 72, 4, 16, rng.standard_normal(3 * 72), s)
        out, per = "y", 72
    else:
        heads = (2, 4, 16, 16)
        p, env = delta_case(rng, heads, 16, rng.standard_normal(4 * 16 * 16) * 0.3, s)
        out, per = "o", 4 * 16
    got, want = run_and_reference(device, p, env, caps)
    assert not want[out][live * per :].any()  # the reference's padding rows: zero
    assert nmse(got[out], want[out]) <= LIMIT
    state = "hist" if kind == "conv" else "s"
    assert nmse(got[state], want[state]) <= LIMIT

"""attention (GQA, causal over rows 0..pos of the caches) against the float64 reference.

Ids read `attention-h<heads>kv<kv heads>d<head_dim>-len<pos+1>-<grid>-<path>`; grid `direct` is a
single pass (S = 1), `split8` / `split3` the split-K pass plus the combine pass. `attention-sinks-*`:
gpt-oss's attention sinks (the op's optional 5th input).
"""

import zlib
from dataclasses import replace

import numpy as np
import pytest

from tests.lowering.kernel_harness import (
    PackedWeight,
    caps_of,
    draw_sinks,
    head_nmse,
    nmse,
    one_op,
    run_and_reference,
    step,
)
from vkdecode.lowering.calls import attention_splits
from vkdecode.lowering.ops import op_calls
from vkdecode.reference import run_op

CTX = 128
# Scores, exp and two weighted sums in f32 against float64: ~1e-13 observed; the bound leaves
# room for GPU exp (a few ulp) and different summation orders across split counts.
LIMIT = 1e-9
GRIDS = {"direct": 256, "split8": 16, "split3": 50}  # attn_max_chunk -> S = ceil(CTX / chunk)
HEADS = [(4, 4, 64), (6, 2, 64), (8, 2, 64), (2, 1, 128), (3, 1, 6)]  # GQA ratios 1, 3, 4; odd d


def attention_case(rng, h, kvh, d, n, kv="f32", sinks=False, **attrs):
    """One attention op at position n - 1 over CTX-row caches of `kv`, and its inputs: q, caches
    with garbage (1e4) in the rows past pos, which the kernel must not read; with sinks, gpt-oss's
    per-head sinks as a 5th input (draw_sinks)."""
    ins = {
        "q": ((h * d,), "f32", "activation"),
        "kc": ((CTX, kvh * d), kv, "state"),
        "vc": ((CTX, kvh * d), kv, "state"),
        "step": ((8,), "u32", "step"),
    }
    if sinks:
        ins["sinks"] = ((h,), "f32", "weight")
    p = one_op(
        "attention",
        ins,
        {"o": ((h * d,), "f32", "output")},
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=d,
        scale=d**-0.5,
        **attrs,
    )
    env = {
        "q": (rng.standard_normal(h * d) * 2).astype(np.float32),
        "kc": rng.standard_normal((CTX, kvh * d)).astype(np.float32),
        "vc": rng.standard_normal((CTX, kvh * d)).astype(np.float32),
        "step": step(0, n - 1),
    }
    if sinks:
        env["sinks"] = PackedWeight("f32", (h,), {"data": draw_sinks(rng, h)})
    env["kc"][n:] = 1e4
    return p, env


def _params():
    for h, kvh, d in HEADS:
        for n in (1, 2, 31, 33, 100):
            for grid in GRIDS:
                for path in ("sg", "smem"):
                    if path == "sg" and grid == "split3" and n not in (33, 100):
                        continue
                    yield pytest.param(
                        h, kvh, d, n, grid, path, id=f"attention-h{h}kv{kvh}d{d}-len{n}-{grid}-{path}"
                    )


@pytest.mark.parametrize("h,kvh,d,n,grid,path", list(_params()))
def test_attention(device, h, kvh, d, n, grid, path):
    _check_attention(device, h, kvh, d, n, grid, path, "f32")


@pytest.mark.parametrize(
    "h,kvh,d,n,grid,path",
    [
        pytest.param(h, kvh, d, n, g, pa, id=f"attention-f16kv-h{h}kv{kvh}d{d}-len{n}-{g}-{pa}")
        for h, kvh, d in [(4, 4, 64), (6, 2, 64), (2, 1, 128), (3, 1, 6)]
        for n in (1, 33, 100)
        for g, pa in [("direct", "sg"), ("split8", "smem"), ("split3", "sg")]
    ],
)
def test_attention_f16_cache(device, h, kvh, d, n, grid, path):
    """f16 caches (halves read with unpackHalf2x16) against the reference on the same halves."""
    _check_attention(device, h, kvh, d, n, grid, path, "f16")


def _check_attention(device, h, kvh, d, n, grid, path, kv):
    caps = caps_of(device)
    if path == "sg" and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    caps = replace(caps, subgroup_arithmetic=(path == "sg"), attn_max_chunk=GRIDS[grid])
    rng = np.random.default_rng(zlib.crc32(f"{h},{kvh},{d},{n}".encode()))
    p, env = attention_case(rng, h, kvh, d, n, kv)  # rows past pos: garbage the kernel must not read
    if kv == "f16":  # the reference reads the very halves the GPU holds
        env["kc"], env["vc"] = (env[c].astype(np.float16).astype(np.float32) for c in ("kc", "vc"))
    got, want = run_and_reference(device, p, env, caps)
    err = nmse(got["o"], want["o"])
    assert err <= LIMIT, f"nmse {err:.3g}"
    s, _ = attention_splits(CTX, caps)
    assert len(op_calls(p, 0, caps)) == (1 if s == 1 else 2)


def _window_params():
    for h, kvh, d in ((4, 2, 64), (3, 1, 6)):
        for n, window in ((5, 1), (33, 4), (100, 32), (20, 64)):  # the last: window longer than len
            for grid in ("direct", "split3"):
                for path in ("sg", "smem"):
                    case = (h, kvh, d, n, window, grid, path)
                    yield pytest.param(
                        *case, id=f"attention-window{window}-h{h}kv{kvh}d{d}-len{n}-{grid}-{path}"
                    )


@pytest.mark.parametrize("h,kvh,d,n,window,grid,path", list(_window_params()))
def test_attention_window(device, h, kvh, d, n, window, grid, path):
    """Sliding window: rows older than len - window hold garbage the kernel must not read."""
    caps = caps_of(device)
    if path == "sg" and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    caps = replace(caps, subgroup_arithmetic=(path == "sg"), attn_max_chunk=GRIDS[grid] // 8 or 1)
    rng = np.random.default_rng(zlib.crc32(f"w{h},{kvh},{d},{n},{window}".encode()))
    p, env = attention_case(rng, h, kvh, d, n, window=window)
    env["kc"][: max(0, n - window)] = 1e4  # outside the window: would dominate if read
    env["vc"][: max(0, n - window)] = 1e4
    got, want = run_and_reference(device, p, env, caps)
    assert np.abs(want["o"]).max() < 100  # the reference itself stays inside the window
    err = nmse(got["o"], want["o"])
    assert err <= LIMIT, f"nmse {err:.3g}"


def _sinks_params():
    for h, kvh, d in ((6, 2, 64), (4, 4, 64), (3, 1, 6)):
        # split8: 16 rows a split, so len 16 is one live split (it writes the final o) and 17 two
        for grid, lens in (("direct", (1, 33, 100)), ("split8", (16, 17, 100))):
            for n in lens:
                for window in (0, 24):
                    for path in ("sg", "smem"):
                        case = (h, kvh, d, n, window, grid, path)
                        yield pytest.param(
                            *case, id=f"attention-sinks-h{h}kv{kvh}d{d}-len{n}-w{window}-{grid}-{path}"
                        )


@pytest.mark.parametrize("h,kvh,d,n,window,grid,path", list(_sinks_params()))
def test_attention_sinks(device, h, kvh, d, n, window, grid, path):
    """gpt-oss's sinks (the op's optional 5th input), one logit per head in the softmax's max and
    denominator: the single pass and split-K + combine (split 0 alone takes the sink, whether one
    split is live or several), GQA, a sliding window, sinks N(0, 2) with one head at +30 (its o
    shrinks to ~1e-11: checked head by head) and one at -30."""
    caps = caps_of(device)
    if path == "sg" and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    caps = replace(caps, subgroup_arithmetic=(path == "sg"), attn_max_chunk=GRIDS[grid])
    rng = np.random.default_rng(zlib.crc32(f"sinks{h},{kvh},{d},{n},{window}".encode()))
    p, env = attention_case(rng, h, kvh, d, n, sinks=True, **({"window": window} if window else {}))
    env["kc"][: max(0, n - window) if window else 0] = 1e4
    got, want = run_and_reference(device, p, env, caps)
    err = head_nmse(got["o"], want["o"], h, d)
    assert err <= LIMIT, f"worst head nmse {err:.3g}"
    # the test can fail: the same op without its sinks is far off
    no_sinks = {**env, "sinks": PackedWeight("f32", (h,), {"data": np.full(h, -np.inf, np.float32)})}
    assert head_nmse(run_op(p.ops[0], p, no_sinks, dtype=np.float64)["o"], want["o"], h, d) > 1e3 * LIMIT
    calls = op_calls(p, 0, caps)
    assert ("SINKS", "1") in calls[0].defines and calls[0].bindings[-1].value == "sinks"
    # split: the combine is the plain one (split 0's partials hold the sink)
    assert [c.shader for c in calls[1:]] == (["attention_combine"] if GRIDS[grid] < CTX else [])
    assert all("sinks" not in {b.value for b in c.bindings} for c in calls[1:])

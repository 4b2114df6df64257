"""gpt-oss's attention sinks (the attention op's optional 5th input) through the fused regions, against
the float64 reference: the decode step's ROPE_KV_WRITE_ATTENTION (and QK_NORM_) in both kernel
forms (workgroup, subgroup rows), single pass and split-K, the split combined by attention_combine
or by the o-projection as it loads them (absorb_combines), at positions with one live split and
with several, with and without a sliding window; a batched step's rope + KV write + attention, op by
op (attention_rows BATCH) and fused (attention_rows FUSED), rows of other slots at positions on both
sides of a key tile. Every case also checks that dropping the sinks would fail it.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fusion.ir import STEP_WORDS, Program
from fusion.partition import partition
from fusion.rules import BATCH_RULES
from tests.lowering.kernel_harness import (
    OpRun,
    PackedWeight,
    batch_step,
    caps_of,
    draw_sinks,
    head_nmse,
    nmse,
    run_ops_reference,
)
from vkdecode.lowering.attention import absorb_combines
from vkdecode.lowering.regions import region_calls
from vkdecode.reference import make_step

LIMIT = 1e-9  # f32 against float64, as tests/lowering/test_ops_attention.py
CTX = 64
BATCH_STEP = "batch_step"


def _layer(h, kvh, d, window, qk_norm=False, o_proj=False, cache_rows=CTX, step="step", **rows) -> Program:
    """(q/k norm,) rope, KV write and attention with sinks (+ the o-projection and residual add):
    a layer's attention, its inputs activations with no producer (so never verify()d). rows: the
    attrs of a batched step (rows, batch, slot_rows), none for the decode step."""
    p = Program("sinks-layer")
    for name, n in (
        ("q", h * d),
        ("k", kvh * d),
        ("v", kvh * d),
        ("qr", h * d),
        ("kr", kvh * d),
        ("o", h * d),
    ):
        p.value(name, (rows.get("rows", 1) * n,), "f32", "activation")
    p.value(step, (rows.get("rows", 1) * STEP_WORDS,), "u32", "step")
    for name, shape in (("freqs", (d // 2,)), ("sinks", (h,)), ("qn_w", (d,)), ("kn_w", (d,))):
        p.value(name, shape, "f32", "weight")
    for c in ("kc", "vc"):
        p.value(c, (cache_rows, kvh * d), "f32", "state")
    q, k = "q", "k"
    if qk_norm:
        p.value("qn", (rows.get("rows", 1) * h * d,), "f32", "activation")
        p.value("kn", (rows.get("rows", 1) * kvh * d,), "f32", "activation")
        p.op("rms_norm", ["q", "qn_w"], ["qn"], eps=1e-6)
        p.op("rms_norm", ["k", "kn_w"], ["kn"], eps=1e-6)
        q, k = "qn", "kn"
    p.op("rope", [q, step, "freqs"], ["qr"], n_heads=h, head_dim=d, layout="neox", **rows)
    p.op("rope", [k, step, "freqs"], ["kr"], n_heads=kvh, head_dim=d, layout="neox", **rows)
    p.op("kv_write", ["kr", "v", step], ["kc", "vc"], **rows)
    attn = dict(
        n_heads=h, n_kv_heads=kvh, head_dim=d, scale=d**-0.5, **({"window": window} if window else {})
    )
    p.op("attention", ["qr", "kc", "vc", step, "sinks"], ["o"], **attn, **rows)
    if o_proj:  # the o-projection + residual (MATMUL_ADD), which may combine split attention itself
        for name, kind in (("y", "activation"), ("res", "activation"), ("out", "output")):
            p.value(name, (h * d,), "f32", kind)
        p.value("wo", (h * d, h * d), "f32", "weight")
        p.op("matmul", ["wo", "o"], ["y"])
        p.op("add", ["y", "res"], ["out"])
    return p


def _weights(rng, h, d) -> dict:
    w = {
        "freqs": (10000.0 ** (-np.arange(0, d, 2) / d)).astype(np.float32),
        "sinks": draw_sinks(rng, h),
        "qn_w": rng.uniform(0.5, 1.5, d).astype(np.float32),
        "kn_w": rng.uniform(0.5, 1.5, d).astype(np.float32),
        "wo": (rng.standard_normal((h * d, h * d)) / np.sqrt(h * d)).astype(np.float32),
    }
    return {n: PackedWeight("f32", a.shape, {"data": a}) for n, a in w.items()}


def _no_sinks(env: dict, h: int) -> dict:
    return {**env, "sinks": PackedWeight("f32", (h,), {"data": np.full(h, -np.inf, np.float32)})}


def _calls(p: Program, caps, rules=None, absorb=False) -> tuple[list, list]:
    regions = partition(p, rules)
    calls, owners = [], []
    for i, r in enumerate(regions):
        rc = region_calls(p, r, caps)
        calls += rc
        owners += [i] * len(rc)
    if absorb:
        calls, _ = absorb_combines(p, calls, owners, caps)
    return calls, [r.rule for r in regions]


# --------------------------------------------------------------------- the decode step

DECODE = [
    (h, kvh, d, kernel, grid, window, comb, qk)
    for h, kvh, d in ((4, 2, 16), (3, 1, 64))
    for kernel in ("wg", "sg")
    for grid, combs in (("direct", ("-",)), ("split", ("dispatch", "absorbed")))
    for comb in combs
    for window in (0, 24)
    for qk in ((False, True) if (grid, window) == ("split", 0) else (False,))
]


@pytest.mark.parametrize(
    "h,kvh,d,kernel,grid,window,comb,qk",
    DECODE,
    ids=[
        f"h{h}kv{kvh}d{d}-{ke}-{g}-w{w}-combine-{c}" + ("-qknorm" if qk else "")
        for h, kvh, d, ke, g, w, c, qk in DECODE
    ],
)
def test_rope_kv_write_attention_sinks(device, h, kvh, d, kernel, grid, window, comb, qk):
    """(QK_NORM_)ROPE_KV_WRITE_ATTENTION with sinks: split 0 folds them into its partials, so the
    plain combine (its own dispatch or the o-projection's) gives the sink-softmax. Split grids of 16
    rows: position 15 is one live split (it writes the final o), 16 two, 40 three (a window of 24:
    two grids of 12 rows)."""
    caps = caps_of(device, attn_kernel=kernel if kernel == "wg" else "")
    if kernel == "sg" and not (caps.subgroup_arithmetic and caps.subgroup_fixed):
        pytest.skip("no fixed-size subgroups with arithmetic: the subgroup-rows kernel does not run")
    if kernel == "sg" and d % caps.subgroup_size:
        pytest.skip(f"head_dim {d} does not split over {caps.subgroup_size} lanes: no subgroup-rows kernel")
    # the CPU grid rule on any device (a GPU's splits follow gpu_split_rows): the cases name theirs
    caps = replace(
        caps,
        attn_max_chunk=CTX if grid == "direct" else 16,
        cx_rows=2 if comb == "absorbed" else -1,
        attn_live_rows=-1,
        attn_splits=1,
    )
    p = _layer(h, kvh, d, window, qk_norm=qk, o_proj=True)
    calls, rules = _calls(p, caps, absorb=True)
    assert rules[0] == ("QK_NORM_" if qk else "") + "ROPE_KV_WRITE_ATTENTION", rules
    fused = calls[0]
    assert fused.shader == "rope_kv_write_attention" + ("_sg" if kernel == "sg" else "")
    assert ("SINKS", "1") in fused.defines and fused.bindings[
        int(dict(fused.defines)["B_SINKS"])
    ].value == "sinks"
    shaders = [c.shader for c in calls]
    assert ("attention_combine" in shaders) == (comb == "dispatch"), shaders
    assert any(("COMBINE_X", "1") in c.defines for c in calls) == (comb == "absorbed")
    rng = np.random.default_rng(h * 1000 + d + window)
    for pos in (15, 16, 40):
        env = _weights(rng, h, d)
        env.update(
            {n: rng.standard_normal(p.values[n].numel).astype(np.float32) for n in ("q", "k", "v", "res")}
        )
        env["q"] *= 2
        for c in ("kc", "vc"):
            env[c] = rng.standard_normal((CTX, kvh * d)).astype(np.float32)
            env[c][pos:] = 1e4  # row pos is written by the kernel; later rows must not be read
            env[c][: max(0, pos + 1 - window) if window else 0] = 1e4  # nor rows before the window
        env["step"] = make_step(0, pos)
        got = OpRun(device, p, env, caps, calls=calls).run()
        want = run_ops_reference(p, env)
        assert np.abs(want["o"]).max() < 100, "the reference read a row it must not"
        off = run_ops_reference(p, _no_sinks(env, h))
        if comb != "absorbed":  # o itself (an absorbed combine never writes it)
            err = head_nmse(got["o"], want["o"], h, d)
            assert err <= LIMIT, f"pos {pos}: worst head nmse {err:.3g}"
            assert head_nmse(off["o"], want["o"], h, d) > 1e3 * LIMIT
        err = nmse(got["out"], want["out"])
        assert err <= LIMIT, f"pos {pos}: o-projection nmse {err:.3g}"
        assert nmse(off["out"], want["out"]) > 1e3 * LIMIT
        np.testing.assert_allclose(got["kc"][pos], want["kc"][pos], rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------- a batched step

POSITIONS = (0, 5, 63, 70)  # one row per slot; attention_rows' 64-key tiles on a CPU: 63 | 64
SLOTS = len(POSITIONS)
SLOT_ROWS = 80


def _batch_reference(h, kvh, d, window, env, slots) -> np.ndarray:
    """Row b through the decode layer's reference over its slot's cache rows at its position."""
    dec = _layer(h, kvh, d, window, cache_rows=SLOT_ROWS)
    out = []
    for b, (pos, slot) in enumerate(zip(POSITIONS, slots)):
        rows = slice(slot * SLOT_ROWS, (slot + 1) * SLOT_ROWS)
        one = {n: env[n] for n in ("freqs", "sinks", "qn_w", "kn_w")}
        one.update({n: env[n].reshape(len(POSITIONS), -1)[b] for n in ("q", "k", "v")})
        one.update(kc=env["kc"][rows], vc=env["vc"][rows], step=make_step(0, pos))
        out.append(run_ops_reference(dec, one)["o"])
    return np.concatenate(out)


@pytest.mark.parametrize("window", [0, 13])
@pytest.mark.parametrize("fused", [False, True], ids=["ops", "fused"])
@pytest.mark.parametrize("path", ["sg", "smem"])
@pytest.mark.parametrize("h,kvh,d", [(4, 2, 16), (3, 1, 64)], ids=["h4kv2d16", "h3kv1d64"])
def test_batched_attention_sinks(device, h, kvh, d, path, fused, window):
    """A batched step's rows (each its own slot and position) with sinks: rope_rows, kv_write_rows
    and attention_rows BATCH op by op, or the (ROPE_KV_WRITE_ATTENTION_ROWS) attention_rows FUSED."""
    caps = caps_of(device, attn_rows_fused=1 if fused else -1)
    if path == "sg" and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    caps = replace(caps, subgroup_arithmetic=path == "sg")
    n = len(POSITIONS)
    rows = {"rows": n, "batch": True, "slot_rows": SLOT_ROWS}
    p = _layer(h, kvh, d, window, cache_rows=SLOTS * SLOT_ROWS + SLOTS, step=BATCH_STEP, **rows)
    calls, rules = _calls(p, caps, BATCH_RULES if fused else [])
    att = [c for c in calls if c.shader == "attention_rows"]
    assert len(att) == 1 and ("SINKS", "1") in att[0].defines and (("FUSED", "1") in att[0].defines) == fused
    assert att[0].bindings[int(dict(att[0].defines)["B_SINKS"])].value == "sinks"
    assert (rules[0] == "ROPE_KV_WRITE_ATTENTION_ROWS") == fused, rules
    rng = np.random.default_rng(7 * h + d + window)
    slots = [2, 0, 3, 1]  # not in row order
    env = _weights(rng, h, d)
    env.update({k: rng.standard_normal(p.values[k].numel).astype(np.float32) for k in ("q", "k", "v")})
    for c in ("kc", "vc"):
        env[c] = rng.standard_normal(p.values[c].shape).astype(np.float32)
        for pos, slot in zip(POSITIONS, slots):
            base = slot * SLOT_ROWS
            env[c][base + pos + 1 : base + SLOT_ROWS] = 1e4  # past the row's position
            env[c][base : base + (max(0, pos + 1 - window) if window else 0)] = 1e4  # before its window
    env[BATCH_STEP] = batch_step(POSITIONS, slots)
    got = OpRun(device, p, env, caps, calls=calls).run()
    want = _batch_reference(h, kvh, d, window, env, slots)
    assert np.abs(want).max() < 100, "the reference read a row it must not"
    err = head_nmse(got["o"], want, h, d)
    assert err <= LIMIT, f"worst head nmse {err:.3g}"
    off = _batch_reference(h, kvh, d, window, _no_sinks(env, h), slots)
    assert head_nmse(off, want, h, d) > 1e3 * LIMIT

"""The persistent region (vkdecode/persistent.py, shaders/persistent_ffn_qkv.comp) on lavapipe: its
arithmetic against the reference and the region path (one workgroup, where the grid barrier holds
trivially, and its phases one per dispatch on many workgroups), the probe saying no on a CPU, and a
barrier that gave up surfacing as an error. Its speed and the probe saying yes are H100 matters
(bench/persistent_probe.py)."""
from __future__ import annotations

import struct
import time
from dataclasses import replace

import numpy as np
import pytest

from tests.helpers.make_models import tiny_hf_model, write_gguf
from tests.helpers.reference_run import greedy_against_reference
from vkdecode import persistent
from vkdecode.executors import make_executor
from vkdecode.kernels import KernelCaps
from vkdecode.models.loader import load_model
from vkdecode.reference import Reference

STEPS = 12
# (family, weight dtype): llama and qwen3 merge the next q/k/v too (qwen3's q/k norms live in the
# attention); qwen2's q/k/v biases keep its RMS_NORM_MATMUL a dispatch of its own
CASES = [("llama", "f16"), ("qwen3", "q4_1"), ("qwen2", "q8_0"), ("llama", None), ("llama", "q5_1"),
         ("qwen3", "iq4_nl"), ("llama", "q5_0"), ("qwen3", "q4_0")]


@pytest.fixture(scope="module")
def models(models_dir):
    out = {}
    for fam, dt in CASES:
        hf = tiny_hf_model(fam, models_dir)
        src = write_gguf(hf, models_dir / f"{fam}.persistent.{dt}.gguf", dt) if dt else hf
        out[(fam, dt)] = load_model(src, ctx=48)
    return out


def _forced(device, groups: int = 1) -> KernelCaps:
    """Caps that merge on lavapipe: a GPU's, with the grid given (the probe is patched)."""
    return replace(KernelCaps.from_info(device.info), persistent=groups, device_cpu=False)


def _by_phase(merge):
    """merge, then each merged call as its three phases, one dispatch each (modes 2, 3, 4)."""
    def split(device, program, calls, owners, caps):
        calls, owners = merge(device, program, calls, owners, caps)
        out_c, out_o = [], []
        for c, o in zip(calls, owners):
            if c.shader != persistent.SHADER:
                out_c.append(c)
                out_o.append(o)
                continue
            n = 3 if ("QKV", "1") in c.defines else 2
            for m in range(n):
                out_c.append(replace(c, push=struct.pack("<II", persistent.MODE_PHASE + m, persistent.SPIN_RUN)))
                out_o.append(o)
        return out_c, out_o
    return split


def _shaders(ex) -> list[str]:
    return [it.call.shader for it in ex.items]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1] or 'f32'}")
@pytest.mark.parametrize("form", ["one-workgroup", "phases"])
def test_persistent_matches_reference_and_regions(device, models, monkeypatch, case, form):
    m = models[case]
    ref = Reference(m.program, m.weights)
    with make_executor("fused", device, m.program, m.weights) as ex:
        plain, _ = greedy_against_reference(ex, ref, STEPS)
        plain_disp = len(ex.items)
    groups = 1 if form == "one-workgroup" else 5     # 5: blocks land on every workgroup unevenly
    monkeypatch.setattr(persistent, "probe_groups", lambda device, program, p, caps: caps.persistent)
    if form == "phases":
        monkeypatch.setattr(persistent, "merge", _by_phase(persistent.merge))
    with make_executor("fused", device, m.program, m.weights, caps=_forced(device, groups)) as ex:
        layers = sum(1 for r in ex.regions if r.rule == "RMS_NORM_MATMUL_SILU_MUL")
        merged = [it for it in ex.items if it.call.shader == persistent.SHADER]
        qkv = case[0] != "qwen2"
        with_qkv = layers - 1 if qkv else 0            # the last layer has no next q/k/v
        if form == "phases":
            assert len(merged) == 3 * with_qkv + 2 * (layers - with_qkv)
        else:
            assert len(merged) == layers
        assert all(it.call.groups == (groups, 1, 1) for it in merged)
        assert sum(("QKV", "1") in it.call.defines for it in merged) == with_qkv * (3 if form == "phases" else 1)
        if form == "one-workgroup":   # 3 dispatches -> 1 per layer (the last layer's: 2 -> 1)
            assert plain_disp - len(ex.items) == (2 * layers - 1 if qkv else layers)
        toks, _ = greedy_against_reference(ex, ref, STEPS)
    assert toks == plain


def test_probe_says_no_on_lavapipe(device, models):
    """The device's own caps never merge on a CPU, and the probe itself fails there: lavapipe runs a
    few workgroups at a time, so 256 of them never meet at a grid barrier. It gives up, bounded."""
    m = models[("llama", "f16")]
    caps = KernelCaps.from_info(device.info)
    if not caps.device_cpu:
        pytest.skip("a GPU runs its grid at once: bench/persistent_probe.py exercises the probe there")
    assert not persistent.eligible(replace(caps, persistent=64))
    with make_executor("fused", device, m.program, m.weights, caps=replace(caps, persistent=64)) as ex:
        assert persistent.SHADER not in _shaders(ex)
        calls = [it.call for it in ex.items]
    p = next(q for q in (persistent._parse(m.program, calls, i) for i in range(len(calls))) if q)
    call = persistent.persistent_call(m.program, p, 1, _forced(device), persistent.MODE_PROBE, persistent.SPIN_PROBE)
    t0 = time.perf_counter()
    assert not persistent.run_probe(device, call, 256)
    assert time.perf_counter() - t0 < 30
    assert persistent.run_probe(device, call, 1)       # one workgroup always meets itself
    # and a GPU-like caps whose probe fails keeps the separate dispatches
    with make_executor("fused", device, m.program, m.weights, caps=_forced(device, 128)) as ex:
        assert persistent.SHADER not in _shaders(ex)


def test_a_barrier_that_gave_up_raises(device, models, monkeypatch):
    m = models[("llama", "f16")]
    monkeypatch.setattr(persistent, "probe_groups", lambda device, program, p, caps: caps.persistent)
    with make_executor("fused", device, m.program, m.weights, caps=_forced(device)) as ex:
        ex.step(7, 0)
        ex.plan.slices[(persistent.ERR, "data")].write(np.ones(1, np.uint32))   # what a timed-out wait sets
        with pytest.raises(persistent.PersistentRegionError, match="not all resident"):
            ex.step(7, 1)
        ex.step(7, 1)           # cleared: the next step runs


def test_declines_what_it_does_not_cover(models):
    m = models[("llama", "f16")]
    from fusion.partition import partition
    from vkdecode.lowering import region_calls
    caps = replace(KernelCaps(subgroup_size=32, subgroup_arithmetic=True, max_storage_range=1 << 31,
                              max_invocations=1024, max_shared=49152, min_align=64), persistent=8)
    calls = [c for r in partition(m.program, None) for c in region_calls(m.program, r, caps)]
    i = next(i for i, c in enumerate(calls) if c.shader == "rms_norm_matmul_silu_mul")
    assert persistent._parse(m.program, calls, i) is not None
    gelu = replace(calls[i], defines=calls[i].defines + (("GELU", "1"),))
    assert persistent._parse(m.program, calls[:i] + [gelu] + calls[i + 1:], i) is None
    # a down projection that is not this FFN's (its input is another value)
    down = calls[i + 1]
    other = replace(down, bindings=tuple(replace(b, value="x_other") if j == 1 else b
                                         for j, b in enumerate(down.bindings)))
    assert persistent._parse(m.program, calls[:i + 1] + [other] + calls[i + 2:], i) is None
    assert not persistent.eligible(replace(caps, persistent=0))
    assert not persistent.eligible(replace(caps, subgroup_arithmetic=False))


def test_profiled_regions_include_the_absorbed_ones(device, models, monkeypatch):
    m = models[("llama", "f16")]
    monkeypatch.setattr(persistent, "probe_groups", lambda device, program, p, caps: caps.persistent)
    with make_executor("fused", device, m.program, m.weights, caps=_forced(device), profile=True) as ex:
        ex.step(7, 0)
        us = ex.region_times_us()
        assert len(us) == len(ex.regions) and all(u >= 0 for u in us)
        absorbed = {ri for ri in range(len(ex.regions)) if not any(it.region == ri for it in ex.items)}
        # their timestamps are written (after the merged call's): none reads as unset or negative
        assert absorbed and sum(us) > 0

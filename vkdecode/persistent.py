"""The persistent region: a layer's feed-forward half and the next layer's q/k/v projections
(RMS_NORM_MATMUL_SILU_MUL, MATMUL_ADD, RMS_NORM_MATMUL) as ONE dispatch of resident workgroups that
hand each phase to the next through a grid barrier (shaders/persistent_ffn_qkv.comp), instead of
three dispatches with a pipeline barrier between each.

Off by default: on an H100 it is slower than the three tuned dispatches it replaces (SmolLM2-135M
Q4_1: 15.6 vs 11.3 µs per layer, Qwen3-0.6B F16: 25.7 vs 16.2; the whole step 979-1015 vs 691 µs;
bench/results/nvidia-h100-80gb-hbm3/persistent/). A grid barrier costs ~1.5 µs there against ~2.0
for a dispatch with its pipeline barrier, so a merged boundary saves at most ~0.5 µs, and its
phases, a fixed grid of one to two workgroups per SM, run about twice as long as the region
kernels' thousands of workgroups. KernelCaps.persistent = N turns it on
with N workgroups, for measuring and for work on the phases.

A grid barrier is only safe where every workgroup of the dispatch runs at once, which Vulkan cannot
promise or query. So the merge happens only where a probe of the very pipeline it would run (same
shader, defines and spec constants: the same registers and occupancy) passed its grid barriers at
twice the grid it will use, and never on CPU devices (KernelCaps.device_cpu), where workgroups run
a few at a time. The shader's waits are bounded, so a wrong guess sets an error word the executor
checks after every step (PersistentRegionError), never a hang or a silent wrong token. The
three-dispatch regions stay the fallback and the reference: the merged call's phases can also run
one per dispatch (mode 2 + p) anywhere, which is how lavapipe tests them with many workgroups.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from fusion.ir import Program
from vkdecode.errors import VulkanError
from vkdecode.fused_matvec import _Slots, qkv_projection
from vkdecode.kernels import Binding, KernelCall, KernelCaps, _dtype_define, _reduce_defines, weight_parts

SHADER = "persistent_ffn_qkv"
WG = 256                    # invocations per workgroup (8 subgroups of 32 on NVIDIA)
SYNC = "scratch:persistent.sync"    # arrivals, departures: device-local, zero between dispatches
ERR = "scratch:persistent.err"      # set by a wait that gave up: host-visible
SPIN_RUN = 1 << 22          # polls before a wait in a decode step gives up (~seconds: never in a healthy run)
SPIN_PROBE = 1 << 15        # polls before a probe wait gives up
PROBE_GROUPS = (1024, 512, 256, 128, 64)   # grids bench/persistent_probe.py tries
MODE_ALL, MODE_PROBE, MODE_PHASE = 0, 1, 2
# dtypes whose units the phases read with one UNIT_ELEMS for every width (no K-quant wide units)
DTYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


class PersistentRegionError(VulkanError):
    """A persistent region's grid barrier gave up waiting: its workgroups were not all resident."""


@dataclass
class _Parsed:
    x: str
    norm_ffn: str
    gate: str
    up: str
    g: str
    down: str
    y: str
    dtype: str
    kh: int
    kf: int
    eps_f: float
    qkv: tuple | None = None    # (norm_attn, (wq, wk, wv), (q, k, v), eps_a)


def _defs(call: KernelCall) -> dict:
    return dict(call.defines)


def _weights(program: Program, call: KernelCall) -> list[str]:
    seen = []
    for b in call.bindings:
        v = program.values.get(b.value)
        if v is not None and v.kind == "weight" and len(v.shape) == 2 and b.value not in seen:
            if b.rows is not None:
                return []           # a row-chunked weight: not one call's whole matrix
            seen.append(b.value)
    return seen


def _parse(program: Program, calls: list[KernelCall], i: int) -> _Parsed | None:
    """The FFN (+ next q/k/v) calls starting at calls[i], if the persistent shader covers them."""
    if i + 1 >= len(calls):
        return None
    up, down = calls[i], calls[i + 1]
    if up.shader != "rms_norm_matmul_silu_mul" or down.shader != "matmul_add":
        return None
    du, dd = _defs(up), _defs(down)
    if {"BIAS", "GELU"} & du.keys() or {"BIAS", "COMBINE_X"} & dd.keys():
        return None
    wu, wd = _weights(program, up), _weights(program, down)
    if len(wu) != 2 or len(wd) != 1:
        return None
    x, nf, g = (up.bindings[int(du[k])].value for k in ("B_X", "B_NW", "B_Y"))
    nd = len(weight_parts(program.values[wd[0]].dtype))
    dx, dres, dy = (b.value for b in down.bindings[nd:nd + 3])
    dtype = program.values[wu[0]].dtype
    kf, kh = program.values[wu[0]].shape
    if dx != g or dres != x or dtype not in DTYPES or kh % 8 or kf % 8:
        return None
    if any(program.values[w].dtype != dtype for w in wu + wd) or program.values[wd[0]].shape != (kh, kf):
        return None
    p = _Parsed(x, nf, wu[0], wu[1], g, wd[0], dy, dtype, kh, kf, float(up.spec[3]))
    proj = qkv_projection(calls[i + 2]) if i + 2 < len(calls) else None
    if proj is not None:
        px, na, ws, outs, eps_a = proj
        if px == dy and all(program.values[w].dtype == dtype and program.values[w].shape[1] == kh for w in ws):
            p.qkv = (na, ws, outs, eps_a)
    return p


def persistent_call(program: Program, p: _Parsed, groups: int, caps: KernelCaps,
                    mode: int = MODE_ALL, spin: int = SPIN_RUN) -> KernelCall:
    s = _Slots()
    s.add("B_X", Binding(p.x))
    s.add("B_NF", Binding(p.norm_ffn))
    s.weight(program, p.gate, 0)
    s.weight(program, p.up, 1)
    writes = [s.add("B_G", Binding(p.g))]
    s.weight(program, p.down, 2)
    writes.append(s.add("B_Y", Binding(p.y)))
    mq = mk = mv = 1
    eps_a = 1e-6
    if p.qkv is not None:
        na, ws, outs, eps_a = p.qkv
        s.add("B_NA", Binding(na))
        for slot, w in enumerate(ws):
            s.weight(program, w, 3 + slot)
        writes += [s.add(n, Binding(o)) for n, o in zip(("B_Q", "B_K", "B_V"), outs)]
        mq, mk, mv = (program.values[w].shape[0] for w in ws)
        s.defines.append(("QKV", "1"))
    writes += [s.add("B_SYNC", Binding(SYNC)), s.add("B_ERR", Binding(ERR))]
    defines = s.defines + [_dtype_define(p.dtype)] + list(_reduce_defines(caps))
    defines += [("WVEC", "1")] if p.dtype in ("f32", "f16") else []
    label = f"{p.g}+{p.y}" + (f"+{'+'.join(p.qkv[2])}" if p.qkv else "")
    return KernelCall(SHADER, (WG, p.kh, p.kf, p.eps_f, eps_a, mq, mk, mv), tuple(s.bindings), tuple(writes),
                      (groups, 1, 1), push=struct.pack("<II", mode, spin), defines=tuple(defines),
                      scratch=((SYNC, 16), (ERR, 16)), label="persistent:" + label)


def eligible(caps: KernelCaps) -> bool:
    return caps.persistent > 0 and not caps.device_cpu and caps.subgroup_arithmetic and caps.max_invocations >= WG


def merge(device, program: Program, calls: list[KernelCall], owners: list[int],
          caps: KernelCaps) -> tuple[list, list]:
    """Peephole over a fused decode step: each FFN (+ next q/k/v) run of calls becomes one persistent
    call where the probe says its grid is resident (probe_groups). The merged call is counted with
    the FFN's region; the regions it absorbed keep their ops and run no dispatch of their own."""
    if not eligible(caps) or "chunk_rows" in program.meta:
        return calls, owners
    out_calls, out_owners = [], []
    i = 0
    while i < len(calls):
        p = _parse(program, calls, i)
        groups = probe_groups(device, program, p, caps) if p is not None else 0
        if groups:
            out_calls.append(persistent_call(program, p, groups, caps))
            out_owners.append(owners[i])
            i += 3 if p.qkv is not None else 2
            continue
        out_calls.append(calls[i])
        out_owners.append(owners[i])
        i += 1
    return out_calls, out_owners


def probe_groups(device, program: Program, p: _Parsed, caps: KernelCaps) -> int:
    """Workgroups the merged call runs with: caps.persistent, if a probe run of this very pipeline
    passed every grid barrier on twice as many (a margin: the probe sits at the edge of residency,
    an H100 passed 1024 workgroups of 256 invocations in some runs and not in others); 0 if not,
    and the separate dispatches stay. Cached per device and pipeline."""
    call = persistent_call(program, p, 1, caps, MODE_PROBE, SPIN_PROBE)
    key = (call.spec, call.defines, len(call.bindings), caps.persistent)
    cache = device.__dict__.setdefault("_persistent_probe", {})
    if key not in cache:
        cache[key] = caps.persistent if run_probe(device, call, 2 * caps.persistent) else 0
    return cache[key]


def run_probe(device, call: KernelCall, groups: int, timeout_s: float = 30.0) -> bool:
    """One probe dispatch of call's pipeline on `groups` workgroups (mode 1: PROBE_N grid barriers,
    nothing else read or written): True if no wait gave up and the counters came back to zero."""
    from vkdecode.vk.descriptors import write_descriptor_set
    pipe = device.pipeline(call.shader, call.spec, dict(call.defines), len(call.bindings), len(call.push))
    d = _defs(call)
    dummy = device.buffer(256, name="persistent-probe-dummy")
    sync = device.buffer(16, name="persistent-probe-sync")
    err = device.buffer(16, host_visible=True, readback=True, name="persistent-probe-err")
    pool = device.descriptor_pool(1, len(call.bindings))
    cmd = device.command_buffer()
    try:
        sync.write(np.zeros(4, np.uint32))
        err.write(np.zeros(4, np.uint32))
        ranges = [(dummy, 0, dummy.size)] * len(call.bindings)
        ranges[int(d["B_SYNC"])] = (sync, 0, sync.size)
        ranges[int(d["B_ERR"])] = (err, 0, err.size)
        dset = pool.allocate(pipe)
        write_descriptor_set(device, dset, ranges)
        cmd.begin()
        cmd.bind(pipe, dset)
        cmd.push(pipe, struct.pack("<II", MODE_PROBE, SPIN_PROBE))
        cmd.dispatch(groups)
        cmd.host_barrier()
        cmd.end()
        device.submit([cmd], wait=True, timeout_s=timeout_s)
        failed = int(err.read_array(np.uint32, 1)[0])
        left = sync.read_array(np.uint32, 2)
        return failed == 0 and not left.any()
    finally:
        for obj in (cmd, pool, err, sync, dummy):
            obj.close()


def check_error(plan) -> None:
    """Raise if a persistent region's grid barrier gave up since the last check (and clear it)."""
    s = plan.slices.get((ERR, "data"))
    if s is None:
        return
    if int(s.read_array(np.uint32, 1)[0]):
        s.write(np.zeros(1, np.uint32))
        raise PersistentRegionError(
            "a persistent region's grid barrier timed out: its workgroups were not all resident on "
            "this device, so this step's tokens are wrong; rerun with the persistent region off "
            "(KernelCaps persistent=0, the default)")

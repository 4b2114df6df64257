"""Weight prefetch into the GPU's L2 from the fused attention dispatch (shaders/prefetch.glsl).

The fused attention is latency-bound: a few dependent round trips, a few MB of KV rows, DRAM
mostly idle. A peephole over the step's calls appends prefetch workgroups to each attention
dispatch that read the weights the next calls stream (o-projection, gate/up, down, the next
layer's q/k/v), up to a byte budget, so those matvecs read them from L2. The workgroups are
extra grid rows of the same dispatch, so prefetching adds no dispatch and no barrier; they
change no value (their loads only feed a never-read sink), so every call computes what it did.

Vulkan cannot query the L2 size; the budget is a tuning knob (KernelCaps.prefetch_bytes). It is
off by default (PREFETCH_BYTES): it once won on an H100 (Qwen3-0.6B F16, when attention still
read the whole context), but with attention following the position it no longer does there
(below), and CPU devices (no L2 to fill, only work to waste) never had it.
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir import Program
from vkdecode.kernels import Binding, KernelCall, KernelCaps, row_bytes

# Default budget per attention dispatch: none. H100, 8 MiB (the former default) vs none, whole
# fused steps at ctx 1024: Llama-3.1-8B Q4_K_M 3772 vs 3708 µs and 4018 vs 3952 (two runs; 16 MiB
# 4018, 32 MiB 4219), Llama-3.2-1B F16 1226 vs 1219, Qwen3-0.6B F16 1078 vs 1080
# (bench/results/nvidia-h100-80gb-hbm3/prefetch-off/). KernelCaps.prefetch_bytes > 0 turns it on.
PREFETCH_BYTES = 0
# Smaller weights are skipped: their matvecs are latency-bound, L2 gains them nothing (H200,
# bench/results/nvidia-h200/matvec-l2.json: q4_1 SmolLM2 shapes within 0.04 µs of DRAM-resident),
# and prefetching SmolLM2's whole small layers made its step slower (1472 vs 1523 tok/s, H100).
MIN_WEIGHT_BYTES = 2 << 20
PREFETCH_GROUPS = 64        # prefetch workgroups appended to an attention grid (at least)
MAX_BUFFERS = 6             # prefetch.glsl declares up to 6 buffers
SECTOR = 32                 # bytes per prefetch load: the L2's fill unit
SINK = "scratch:prefetch.sink"
HOSTS = ("rope_kv_write_attention", "rope_kv_write_attention_sg")


def budget(caps: KernelCaps) -> int:
    return PREFETCH_BYTES if caps.prefetch_bytes == 0 else max(0, caps.prefetch_bytes)


def _weight_bytes(p: Program, b: Binding) -> int:
    """Bytes a call reads through a 2-D weight binding (0 for anything else)."""
    v = p.values.get(b.value)
    if v is None or v.kind != "weight" or len(v.shape) != 2:
        return 0
    rows = v.shape[0] - b.row_start if b.rows is None else b.rows
    return row_bytes(v.dtype, v.shape[1], b.part) * rows


def upcoming_weights(p: Program, calls: list[KernelCall], start: int, nbytes: int) -> list[tuple[Binding, int]]:
    """(binding, sectors) of the weights of at least MIN_WEIGHT_BYTES calls[start:] read, in call
    order, until the next host, nbytes in all (the last one cut short) or MAX_BUFFERS buffers."""
    out: list[tuple[Binding, int]] = []
    seen: set[Binding] = set()
    for call in calls[start:]:
        if call.shader in HOSTS:
            break
        for i, b in enumerate(call.bindings):
            size = _weight_bytes(p, b) if i not in call.writes else 0
            sectors = min(size, nbytes) // SECTOR if size >= MIN_WEIGHT_BYTES else 0
            if sectors == 0 or b in seen:
                continue
            seen.add(b)
            out.append((b, sectors))
            nbytes -= sectors * SECTOR
            if nbytes < SECTOR or len(out) == MAX_BUFFERS:
                return out
    return out


def with_prefetch(call: KernelCall, targets: list[tuple[Binding, int]], groups: int) -> KernelCall:
    """The attention call with prefetch rows appended to its (S, H, 1) grid: ceil(groups / S)
    rows of S workgroups (an indirect grid: of its live splits), reading targets' sectors, each
    buffer bound after the call's own."""
    s, h, _ = call.groups
    rows = -(-groups // s)
    n = len(call.bindings)
    # a direct grid prefetches with all of its rows; an indirect one (live) keeps `groups` whatever its
    # S (which --ctx sets): GridArgs sizes its rows to the live splits, ceil(PF_G / live)
    pf_g = groups if call.live is not None else rows * s
    defines = [("PF_N", str(len(targets))), ("PF_G", str(pf_g)), ("PF_SINK", str(n + len(targets)))]
    for j, (_, sectors) in enumerate(targets):
        defines += [(f"PF_B{j}", str(n + j)), (f"PF_W{j}", str(sectors))]
    bindings = call.bindings + tuple(b for b, _ in targets) + (Binding(SINK),)
    return replace(call, bindings=bindings, writes=call.writes + (len(bindings) - 1,),
                   groups=(s, h + rows, 1), defines=call.defines + tuple(defines),
                   scratch=call.scratch + ((SINK, 16),), label=call.label + "+prefetch")


def add_prefetch(program: Program, calls: list[KernelCall], owners: list[int],
                 caps: KernelCaps) -> tuple[list, list]:
    """Peephole: every attention call prefetches the weights of the calls after it (budget(caps)
    bytes). owners (each call's region) is returned unchanged: no call is added or removed."""
    nbytes = budget(caps)
    if nbytes < SECTOR:
        return calls, owners
    groups = caps.prefetch_groups or PREFETCH_GROUPS
    out = list(calls)
    for i, call in enumerate(calls):
        if call.shader in HOSTS and call.groups[2] == 1:
            targets = upcoming_weights(program, calls, i + 1, nbytes)
            if targets:
                out[i] = with_prefetch(call, targets, groups)
    return out, owners

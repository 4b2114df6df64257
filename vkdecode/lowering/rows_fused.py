"""Fused projection regions of a narrow prompt chunk (fusion/chunk_rules.py, *_ROWS) -> calls of
shaders/matmul_rows_narrow_fused.comp, paired with their rules in lowering/regions.py.

Why: a narrow chunk (the speculative verify step, small prompt chunks) runs one kernel per op, ~16
dependent dispatches a layer, and on a GPU each costs a few µs of dependency latency whatever its
work. The narrow matmul's workgroup (rows.narrow_rows) can do what decode's fused
matvecs do around it: derive each chunk row's 1/rms itself (RMS_NORM_MATMUL: q, k, v in one
dispatch), pair gate and up rows for SwiGLU / GeGLU, add the residual in the store: 8 dispatches a
layer (norm+qkv, 2 ropes, kv_write, attention, o+add, norm+gate+up+act, down+add).

Rules apply only where caps.chunk_fuse asks for them (off by default: no faster on the H100) and
the per-op chunk takes matmul_rows_narrow (chunk_rules: a GPU's caps, 2..16 rows); a CPU (caps.matmul_narrow < 0) and wider chunks keep the per-op kernels. Every builder returns
None (the region's per-op kernels, always correct) for what the kernel does not cover: a weight
bound in row ranges (beyond maxStorageBufferRange).
"""

from __future__ import annotations

from fusion.chunk_rules import ROW_RULES
from fusion.ir import Program
from fusion.rules import Region
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps, dtype_define, flat_groups, reduce_defines
from vkdecode.lowering.matvec import MAX_SLOTS, Slots, binds_whole, dtype_group
from vkdecode.lowering.rows import NARROW_OUTPUTS, UNIT_DTYPES, matmul_tile_rows, narrow_rows
from vkdecode.quant import FLOAT_TYPES, QUANT_TYPES

SHADER = "matmul_rows_narrow_fused"


def narrow_tile(program: Program, caps: KernelCaps) -> tuple[int, int] | None:
    """(BN, RW) of the fused narrow kernel for a chunk program, or None: only where its matmuls
    take matmul_rows_narrow, and the partial sums of the outputs and of the BN sums of squares fit
    the shared memory."""
    rows = int(program.meta.get("chunk_rows", 0))
    if rows < 2:  # a 1-row chunk's matmuls are decode matvecs (rows.row_op_calls)
        return None
    bn = matmul_tile_rows(rows)
    rw = narrow_rows(caps, bn)
    if not rw or 4 * (NARROW_OUTPUTS + bn) * (NARROW_OUTPUTS + 1) > caps.max_shared:
        return None
    return bn, rw


def chunk_rules(program: Program, caps: KernelCaps) -> tuple:
    """The fusion rules of a chunk program on this device: ROW_RULES for a narrow chunk where
    caps.chunk_fuse asks for them, else none. Off by default: on the H100 (real SmolLM2 Q4_1,
    bench/speculative.py, every draft checked, K=8, summarise) the fused verify steps measured no
    faster than per-op ones (566 vs 582 tok/s; 2026-11-23-session-c/), half the dispatches
    notwithstanding. (The commit that turned them off blamed them for a speculative slowdown. The
    cause was the kv-head chunk attention, see rows.gqa_rows.)"""
    if caps.chunk_fuse <= 0:
        return ()
    return ROW_RULES if narrow_tile(program, caps) is not None else ()


def _call(
    p: Program,
    caps: KernelCaps,
    x: str,
    weights: list[str],
    outs: list[str],
    biases: list,
    norm_w: str | None = None,
    eps: float = 0.0,
    residual: str | None = None,
    act: str | None = None,
) -> KernelCall | None:
    """One dispatch: weights (one dtype group, <= MAX_SLOTS) of one input x; act: GLU (weights are
    gate and up, outs the one activation); residual: ADD (one weight)."""
    tile = narrow_tile(p, caps)
    if tile is None or not all(binds_whole(p, w, caps) for w in weights):
        return None
    bn, rw = tile
    rows = int(p.meta["chunk_rows"])
    dtypes = [p.values[w].dtype for w in weights]
    k = p.values[weights[0]].shape[1]
    ms = [p.values[w].shape[0] for w in weights]
    if len(set(dtypes)) == 1:
        defines = (dtype_define(dtypes[0]),)
    else:  # quant dtypes only (dtype_group): one per slot, shaders/fused_wslot.glsl SLOT_DTYPES
        defines = (("SLOT_DTYPES", "1"),) + tuple(
            (f"DTS_{i}", str(QUANT_TYPES.index(dt))) for i, dt in enumerate(dtypes)
        )
    if k % 32 == 0 and all(dt in UNIT_DTYPES for dt in dtypes):  # as rows._matmul
        defines += (("UNITS", "1"),) + ((("WVEC", "1"),) if dtypes[0] in FLOAT_TYPES else ())
    defines += reduce_defines(caps) + (("NW", str(len(weights))),)
    s = Slots()
    s.add("B_X", Binding(x))
    if norm_w is not None:
        s.add("B_NW", Binding(norm_w))
        s.defines.append(("NORM", "1"))
    writes = []
    for i, (w, b) in enumerate(zip(weights, biases)):
        s.weight(p, w, i)
        if b is not None:
            s.add(f"BB_{i}", Binding(b))
            s.defines.append((f"BIAS_{i}", "1"))
    for i, out in enumerate(outs):
        writes.append(s.add(f"YB_{i}", Binding(out)))
    if residual is not None:
        s.add("B_R", Binding(residual))
        s.defines.append(("ADD", "1"))
    if act is not None:
        s.defines.append(("GLU", "1"))
        if act == "gelu":
            s.defines.append(("GELU", "1"))
        groups = -(-ms[0] // (rw // 2))
    else:
        groups = sum(-(-m // rw) for m in ms)
    spec = (NARROW_OUTPUTS, k, rows, bn, rw, float(eps)) + tuple(ms) + (0,) * (MAX_SLOTS - len(ms))
    return KernelCall(
        SHADER,
        spec,
        tuple(s.bindings),
        tuple(writes),
        flat_groups(groups),
        defines=defines + tuple(s.defines),
        label="+".join(outs),
    )


def rms_norm_matmul_rows(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """Norm + every projection of its output (+ biases): one dispatch per dtype group (q, k, v
    of one model: one)."""
    r = region.roles
    groups: dict[str, list[int]] = {}
    for i, w in enumerate(r["weights"]):
        groups.setdefault(dtype_group(p.values[w].dtype), []).append(i)
    calls = []
    for idx in groups.values():
        for j in range(0, len(idx), MAX_SLOTS):
            part = idx[j : j + MAX_SLOTS]
            call = _call(
                p,
                caps,
                r["x"],
                [r["weights"][i] for i in part],
                [r["outs"][i] for i in part],
                [r["biases"][i] for i in part],
                norm_w=r["norm_w"],
                eps=region.attrs["eps"],
            )
            if call is None:
                return None
            calls.append(call)
    return calls


def glu_rows(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """(Norm +) gate and up (+ biases) + SwiGLU / GeGLU in one dispatch."""
    r = region.roles
    call = _call(
        p,
        caps,
        r["x"],
        [r["w_gate"], r["w_up"]],
        [r["out"]],
        [r.get("b_gate"), r.get("b_up")],
        norm_w=r.get("norm_w"),
        eps=region.attrs.get("eps", 0.0),
        act=region.attrs["act"],
    )
    return None if call is None else [call]


def matmul_add_rows(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """y = residual + (W x (+ bias)) in one dispatch."""
    r = region.roles
    call = _call(p, caps, r["x"], [r["weight"]], [r["out"]], [r.get("bias")], residual=r["residual"])
    return None if call is None else [call]

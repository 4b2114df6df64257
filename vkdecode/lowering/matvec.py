"""Fused matvec regions -> kernel calls: MATMUL_(BIAS_)ADD, RMS_NORM_MATMUL, (RMS_NORM_)MATMUL_SILU_MUL and
RMS_NORM_MATMUL_ARGMAX. Each builder returns None (the region's own per-op kernels) for shapes its
shader does not cover, so a fused region always runs correctly.

Fused shaders that read several weights declare each one in its own binding; the binding numbers
are passed as defines (WB_p, SB_p, ...), so one shader source serves every combination.
"""

from __future__ import annotations

import struct

from fusion.ir import Program
from fusion.region import Region
from vkdecode.lowering.calls import (
    KWIDE_FFN_MIN_IN,
    Binding,
    KernelCall,
    KernelCaps,
    dtype_define,
    flat_groups,
    kq_idot,
    kw_split,
    kwide,
    matvec_shape,
    reduce_defines,
    row_chunks,
    weight_bindings,
    weight_parts,
    wg_size,
    wvec_defines,
)
from vkdecode.quant import K_TYPES, KSPLIT_TYPES, QUANT_TYPES

MAX_SLOTS = 4  # weights one rms_norm_matmul dispatch reads (q, k, v need 3)
# about this many (max, index) pairs for the final argmax pass. Each workgroup reduces its row
# blocks one after another, so few pairs serialise the lm_head; many make the one-workgroup final
# pass long. H200, lm_head GPU µs for 512/1024/2048/4096/8192 pairs: SmolLM2 (q8_0 49152x576)
# 101/57/38/37/34, Qwen3-0.6B f16 (151936x1024) 247/145/100/89/90. H100, whole step GPU µs with
# 8 / 4 / 2 / 1 row blocks per workgroup: Llama-3.1-8B Q4_K_M (32064 blocks) 4255 / 4231 / 4193 /
# 4237, Llama-3.2-1B F16 1217 / 1220 / 1220 / 1227, Qwen3-0.6B F16 1165 / 1137 / 1151 / 1149,
# SmolLM2 Q4_1 702 / 692 / 692 / 698 (bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kquant-pos/ab-head-blocks-*):
# 16384 pairs gives 2, 2, 3 and 1 of them.
ARGMAX_PARTIALS = 16384


def binds_whole(p: Program, w: str, caps: KernelCaps) -> bool:
    v = p.values[w]
    return len(row_chunks(v.dtype, v.shape[0], v.shape[1], caps)) == 1


def mv_defines(dtype: str, wvec: bool, caps: KernelCaps, n_in: int) -> tuple:
    return (dtype_define(dtype),) + reduce_defines(caps) + wvec_defines(wvec, caps, n_in, dtype)


class Slots:
    """Binding numbers of a fused call, handed out in order and named by define."""

    def __init__(self):
        self.bindings: list[Binding] = []
        self.defines: list[tuple[str, str]] = []

    def add(self, define: str | None, b: Binding) -> int:
        i = len(self.bindings)
        self.bindings.append(b)
        if define:
            self.defines.append((define, str(i)))
        return i

    def weight(self, p: Program, w: str, slot: int) -> None:
        for part in weight_parts(p.values[w].dtype):
            self.add(f"{'SB' if part == 's' else 'WB'}_{slot}", Binding(w, part))


# ---------------------------------------------------------------- MATMUL_(BIAS_)ADD


def matmul_add(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """y = r + W @ x (+ bias), the bias binding after y (shaders/matmul_add.comp, BIAS)."""
    r = region.roles
    w, x, res, out, bias = r["weight"], r["x"], r["residual"], r["out"], r.get("bias")
    wv = p.values[w]
    n_out, n_in = wv.shape
    chunks = row_chunks(wv.dtype, n_out, n_in, caps)
    calls = []
    for r0, rows in chunks:
        wg, rpw, wvec = matvec_shape(wv.dtype, n_in, rows, caps)
        b = weight_bindings(w, wv.dtype, r0, None if len(chunks) == 1 else rows)
        b += (Binding(x), Binding(res), Binding(out))
        y = len(b) - 1
        b += (Binding(bias),) if bias is not None else ()
        calls.append(
            KernelCall(
                "matmul_add",
                (wg, n_in, rows, rpw),
                b,
                (y,),
                flat_groups(-(-rows // rpw)),
                push=struct.pack("<I", r0),
                defines=mv_defines(wv.dtype, wvec, caps, n_in) + ((("BIAS", "1"),) if bias else ()),
                label=out + (f"[{r0}:]" if len(chunks) > 1 else ""),
            )
        )
    return calls


# ---------------------------------------------------------------- RMS_NORM_MATMUL


def norm_matmul_call(
    p: Program, region: Region, idx: list[int], caps: KernelCaps, normed: str | None = None
) -> KernelCall:
    """rms_norm_matmul over projections idx; normed: a value taking the normed x too (the MoE router's h)."""
    r = region.roles
    ws = [r["weights"][i] for i in idx]
    dtypes = [p.values[w].dtype for w in ws]
    dtype = dtypes[0]
    k = p.values[ws[0]].shape[1]
    rows = [p.values[w].shape[0] for w in ws]
    # mixed quant slots share one unit: wide if every slot is, else 8 elements (q8_0's, K-quants' own)
    mixed = len(set(dtypes)) > 1
    wide = all(kwide(dt, k, caps) for dt in dtypes)
    kq = all(dt in K_TYPES for dt in dtypes)
    wg, rpw, wvec = matvec_shape(dtype if not mixed or wide or kq else "q8_0", k, sum(rows), caps)
    if wide and not caps.matvec_rows:
        # 4 rows a workgroup in wide K-quant units (H100, Llama-3.1-8B Q4_K_M's q/k/v, profiled step:
        # 619 vs 703 µs with 2; the other matvecs lost with 4: bench/results/.../2026-11-25-kquant-pos/ab-8b-mv-detail.json)
        rpw = min(4, wg)
    if not mixed:
        dt_defines = mv_defines(dtype, wvec, caps, k)
    else:  # quant dtypes only (dtype_group): one per slot, shaders/fused_wslot.glsl SLOT_DTYPES
        dt_defines = (
            reduce_defines(caps)
            + (("SLOT_DTYPES", "1"),)
            + tuple((f"DTS_{slot}", str(QUANT_TYPES.index(dt))) for slot, dt in enumerate(dtypes))
        )
        dt_defines += wvec_defines(wvec, caps, k)
    s = Slots()
    s.add("B_X", Binding(r["x"]))
    s.add("B_NW", Binding(r["norm_w"]))
    writes = []
    for slot, i in enumerate(idx):
        s.weight(p, r["weights"][i], slot)
        if r["biases"][i] is not None:
            s.add(f"BB_{slot}", Binding(r["biases"][i]))
            s.defines.append((f"BIAS_{slot}", "1"))
        writes.append(s.add(f"YB_{slot}", Binding(r["outs"][i])))
    if normed is not None:
        writes.append(s.add("B_H", Binding(normed)))
    groups = sum(-(-m // rpw) for m in rows)
    m_spec = tuple(rows) + (0,) * (MAX_SLOTS - len(rows))
    return KernelCall(
        "rms_norm_matmul",
        (wg, k, rpw, float(region.attrs["eps"])) + m_spec,
        tuple(s.bindings),
        tuple(writes),
        flat_groups(groups),
        defines=dt_defines + (("NW", str(len(idx))),) + tuple(s.defines),
        label="+".join(r["outs"][i] for i in idx),
    )


def dtype_group(dtype: str) -> str:
    """Projections of one group share a dispatch: all quant dtypes together (each slot decodes its
    own; a Q4_K_M layer's q, k are q4_k and its v q6_k), f32 and f16 each by themselves."""
    return "quant" if dtype in QUANT_TYPES else dtype


def rms_norm_matmul(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """One dispatch per group of projections (dtype_group; q, k and v: one dispatch)."""
    ws = region.roles["weights"]
    if not all(binds_whole(p, w, caps) for w in ws):
        return None
    groups: dict[str, list[int]] = {}
    for i, w in enumerate(ws):
        groups.setdefault(dtype_group(p.values[w].dtype), []).append(i)
    calls = []
    for idx in groups.values():
        for j in range(0, len(idx), MAX_SLOTS):
            calls.append(norm_matmul_call(p, region, idx[j : j + MAX_SLOTS], caps))
    return calls


# ---------------------------------------------------------------- (RMS_NORM_)MATMUL_SILU_MUL


def swiglu_fit(wg: int, rpw: int, caps: KernelCaps) -> tuple[int, int] | None:
    """(workgroup size, rows a workgroup) of fused_swiglu.glsl within shared memory, or None. Each
    invocation reduces 2 * rows + 1 floats through shared memory (FMV_NR): lavapipe's 16 rows x 256
    invocations for Llama-3.1-8B's 4096-wide input take 33 KB, over its 32 KB
    maxComputeSharedMemorySize (a validation error)."""
    while wg > caps.subgroup_size and 4 * (2 * rpw + 1) * wg > caps.max_shared:
        wg //= 2
        rpw = min(rpw, wg)
    return None if 4 * (2 * rpw + 1) * wg > caps.max_shared else (wg, rpw)


def swiglu_shape(dtype: str, k: int, m: int, caps: KernelCaps) -> tuple[int, int, bool] | None:
    """(workgroup size, rows of each weight a workgroup, wide units) of fused_swiglu.glsl over m rows
    of gate and of up, k wide, or None (no fit in shared memory); the MoE gate/up take it per expert."""
    wg, rpw, wvec = matvec_shape(dtype, k, 2 * m, caps, KWIDE_FFN_MIN_IN)
    if kwide(dtype, k, caps, KWIDE_FFN_MIN_IN) and not caps.matvec_wg:
        # one subgroup a workgroup in wide K-quant units (H100, Llama-3.1-8B Q4_K_M's gate/up,
        # profiled step: 1638 vs 1686 µs with 64 lanes, 1755 with 128: ab-8b-mv-detail.json), 2
        # rows of each weight when split (kwide_rows.glsl: 1479 vs 1955 µs with 4; 64 lanes 1470:
        # bench/results/nvidia-h100-80gb-hbm3/2026-11-25-kwide-split/sweep-split2.json); 4 on integer dot
        # products, whose x conversion the rows share (1113 vs 1164 µs with 2: 2026-11-25-session-h/)
        wg = wg_size(caps, caps.subgroup_size)
        split_rows = 4 if dtype == "q4_k" and kq_idot(caps) else 2
        rpw = min(caps.matvec_rows or (split_rows if kw_split(k, caps, dtype) else rpw), wg)
    fit = swiglu_fit(wg, rpw, caps)
    return None if fit is None else (*fit, wvec)


def _swiglu(norm: bool):
    def build(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
        r = region.roles
        wgate, wup = r["w_gate"], r["w_up"]
        dtype = p.values[wgate].dtype
        m, k = p.values[wgate].shape
        shape = swiglu_shape(dtype, k, m, caps) if binds_whole(p, wgate, caps) else None
        if shape is None:
            return None
        wg, rpw, wvec = shape
        s = Slots()
        s.add("B_X", Binding(r["x"]))
        if norm:
            s.add("B_NW", Binding(r["norm_w"]))
        s.weight(p, wgate, 0)
        s.weight(p, wup, 1)
        y = s.add("B_Y", Binding(r["out"]))
        if r.get("b_gate") is not None:  # RMS_NORM_MATMUL_BIAS_SILU_MUL
            s.add("BB_0", Binding(r["b_gate"]))
            s.add("BB_1", Binding(r["b_up"]))
            s.defines.append(("BIAS", "1"))
        eps = float(region.attrs.get("eps", 0.0))
        shader = "rms_norm_matmul_silu_mul" if norm else "matmul_silu_mul"
        # the GeGLU rules (*_GELU_MUL) run the same kernel with gelu_tanh in the epilogue
        act = (("GELU", "1"),) if region.attrs.get("act") == "gelu" else ()
        return [
            KernelCall(
                shader,
                (wg, k, rpw, eps, m),
                tuple(s.bindings),
                (y,),
                flat_groups(-(-m // rpw)),
                defines=mv_defines(dtype, wvec, caps, k) + tuple(s.defines) + act,
                label=r["out"],
            )
        ]

    return build


rms_norm_matmul_silu_mul = _swiglu(norm=True)
matmul_silu_mul = _swiglu(norm=False)


# ---------------------------------------------------------------- RMS_NORM_MATMUL_ARGMAX


def rms_norm_matmul_argmax(p: Program, region: Region, caps: KernelCaps) -> list[KernelCall] | None:
    """Norm + lm_head writing logits and one (max, index) pair per workgroup, then argmax.comp's
    FINAL pass over the pairs. A head beyond maxStorageBufferRange runs as row chunks, each call
    writing its own range of pairs (push: first logits row, first pair). caps.head_ops (CPUs): the
    region's own per-op kernels instead."""
    if caps.head_ops:
        return None
    r = region.roles
    w, x, logits, token = r["weight"], r["x"], r["logits"], r["token"]
    wv = p.values[w]
    n_out, k = wv.shape
    part = f"scratch:{token}.argmax"
    chunks = row_chunks(wv.dtype, n_out, k, caps)
    plan = []
    for r0, rows in chunks:
        wg, rpw, wvec = matvec_shape(wv.dtype, k, rows, caps, KWIDE_FFN_MIN_IN)
        # One subgroup-sized workgroup, 4 rows per block (H200, lm_head + argmax GPU µs: SmolLM2's
        # q8_0 49152x576 32.8 -> 24.3 against matvec_shape's 64 x 2; Qwen3's f16 151936x1024 87.8
        # either way; 128- and 256-wide workgroups were slower).
        wg, rpw = caps.matvec_wg or wg_size(caps, 32), caps.matvec_rows or 4
        if wvec and wv.dtype in KSPLIT_TYPES and kw_split(k, caps, wv.dtype) and not caps.matvec_rows:
            # split wide units (kwide_rows.glsl) hold 8 rows' words (H100, Llama-3.1-8B's q6_k head:
            # 213 vs 233 µs with 4, 32 lanes; 64 lanes 220: 2026-11-25-kwide-split/sweep-split.json); on integer
            # dot products 4 rows of 64 lanes (106 registers with 8: 228 µs; 64 x 4 197 vs 205 in
            # floats: 2026-11-25-session-h/ab-q6idot.json), but 32 x 8 on rows of 64 units or fewer
            # (H200, Qwen3-30B-A3B's 151936 x 2048 head: 127 -> 103 µs, nvidia-h200/2026-11-27-moe-shapes/)
            rpw = 8
            if wv.dtype == "q6_k" and kq_idot(caps, "q6_k") and k > 2048:
                wg, rpw = caps.matvec_wg or wg_size(caps, 64), 4
        blocks = -(-rows // rpw)
        per = caps.head_blocks or max(1, -(-blocks * len(chunks) // ARGMAX_PARTIALS))  # blocks a group
        plan.append((r0, rows, wg, rpw, wvec, per, -(-blocks // per)))
    n_pairs = sum(g for *_, g in plan)
    scratch = ((part, n_pairs * 8),)
    calls, p0 = [], 0
    for r0, rows, wg, rpw, wvec, per, g in plan:
        b = (Binding(x), Binding(r["norm_w"])) + weight_bindings(
            w, wv.dtype, r0, None if len(chunks) == 1 else rows
        )
        b += (Binding(logits), Binding(part))
        calls.append(
            KernelCall(
                "rms_norm_matmul_argmax",
                (wg, k, rpw, float(region.attrs["eps"]), rows, per),
                b,
                (len(b) - 2, len(b) - 1),
                flat_groups(g),
                push=struct.pack("<II", r0, p0),
                defines=mv_defines(wv.dtype, wvec, caps, k),
                scratch=scratch,
                label=logits + (f"[{r0}:]" if len(chunks) > 1 else ""),
            )
        )
        p0 += g
    defines = reduce_defines(caps) + (("FINAL", "1"),)
    calls.append(
        KernelCall(
            "argmax",
            (wg_size(caps, n_pairs), n_pairs, 1),
            (Binding(part), Binding(token)),
            (1,),
            (1, 1, 1),
            defines=defines,
            scratch=scratch,
            label=token + "[final]",
        )
    )
    return calls

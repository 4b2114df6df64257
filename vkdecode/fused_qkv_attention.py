"""Peephole: the q/k/v projection (RMS_NORM_MATMUL) folded into the attention after it.

Where a head's q, k and v rows are few bytes (SmolLM2: 3 x 64 rows of 576 Q4_1, 69 KB), every
attention workgroup computes its own head's q and its kv head's k and v from x
(shaders/qkv_in.glsl) instead of reading them from a projection dispatch: one dispatch and one
barrier fewer per layer, at the price of each workgroup redoing its kv head's k and v (from L2
after the first). Workgroups of one kv head compute the same rows in the same order, so the k and
v the writer stores are the ones every other workgroup uses. The regions keep their ops; the
projection's region runs no dispatch of its own. Off by default (KernelCaps.attn_qkv_in): measured
slower on an H100, SmolLM2-135M Q4_1 1226 vs 702 GPU µs per token at ctx 1024, 1219 vs 662 at ctx 256
(bench/results/nvidia-h100-80gb-hbm3/fold/): every workgroup redoing its kv head's k and v costs far
more than the dispatch it saves.
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir import Program
from vkdecode.fused_attention import _sg_shared_bytes, reader_counts
from vkdecode.fused_matvec import _Slots, qkv_projection
from vkdecode.kernels import Binding, KernelCall, KernelCaps, row_bytes, weight_parts

ATTENTION = "rope_kv_write_attention_sg"
# bytes of q + k + v rows one attention workgroup reads at most (automatic); SmolLM2's 69 KB pass,
# Qwen3-0.6B's 786 KB (f16, 3 x 128 rows of 1024) do not
MAX_BYTES = 96 << 10
DTYPES = ("f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")


def _fits(program: Program, ws: tuple, head_dim: int) -> bool:
    dts = {program.values[w].dtype for w in ws}
    if len(dts) != 1 or next(iter(dts)) not in DTYPES:
        return False
    dtype = next(iter(dts))
    k = program.values[ws[0]].shape[1]
    if dtype in ("f32", "f16") and k % 8:
        return False
    per_row = sum(row_bytes(dtype, k, part) for part in weight_parts(dtype))
    return 3 * head_dim * per_row <= MAX_BYTES


def _shared_fits(att: KernelCall, caps: KernelCaps) -> bool:
    """The attention's shared memory plus q, k and v of the current token (3 * D floats)."""
    wg, d = att.spec[0], att.spec[3]
    return _sg_shared_bytes(wg, int(dict(att.defines)["LANES"]), d) + 12 * d <= caps.max_shared


def fold_qkv(program: Program, calls: list[KernelCall], owners: list[int],
             caps: KernelCaps) -> tuple[list, list]:
    """Each rms_norm_matmul (q, k, v) right before the subgroup-rows attention that alone reads
    its outputs becomes part of that attention call (QKV_IN), where caps.attn_qkv_in > 0 and a
    workgroup's q/k/v rows are at most MAX_BYTES. Off by default: slower on an H100 (module docstring)."""
    if caps.attn_qkv_in <= 0:
        return calls, owners
    readers = reader_counts(calls)
    out_calls, out_owners = [], []
    i = 0
    while i < len(calls):
        proj = qkv_projection(calls[i])
        att = calls[i + 1] if i + 1 < len(calls) else None
        if (proj is not None and att is not None and att.shader == ATTENTION
                and tuple(b.value for b in att.bindings[:3]) == proj[3]
                and all(readers.get(o, 0) == 1 for o in proj[3])
                and _fits(program, proj[2], att.spec[3]) and _shared_fits(att, caps)):
            out_calls.append(_with_qkv(program, att, proj, calls[i]))
            out_owners.append(owners[i + 1])
            i += 2
            continue
        out_calls.append(calls[i])
        out_owners.append(owners[i])
        i += 1
    return out_calls, out_owners


def _with_qkv(program: Program, att: KernelCall, proj: tuple, pcall: KernelCall) -> KernelCall:
    x, norm_w, ws, _, eps = proj
    slots = _Slots()
    slots.bindings = list(att.bindings)     # the attention's own bindings first, unchanged
    slots.add("B_XIN", Binding(x))
    slots.add("B_NWIN", Binding(norm_w))
    for s, w in enumerate(ws):
        slots.weight(program, w, s)
    # the weights' dtype and unit width, as the projection's kernel had them
    defines = [("QKV_IN", "1")] + slots.defines
    defines += [(k, v) for k, v in pcall.defines if k.startswith("DT_") or k in ("WVEC", "NIB_OLD", "KW_JOINT", "KQ_IDOT", "KQ_IDOT_Q6")]
    k = program.values[ws[0]].shape[1]
    return replace(att, spec=att.spec + (k, eps), bindings=tuple(slots.bindings),
                   defines=att.defines + tuple(defines), label=att.label + "+qkv")

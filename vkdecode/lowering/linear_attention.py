"""Kernel calls of Qwen3.5's linear-attention ops (fusion/ir.py conv1d_step, gated_delta_step):
one dispatch each, their recurrent state bound as a read-write buffer like a KV cache."""

from __future__ import annotations

from fusion.ir import Op, Program
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps, flat_groups, reduce_defines, wg_size


def conv1d_step(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    x, w, step = op.inputs
    y, hist = op.outputs
    rows = int(op.attrs.get("rows", 1))  # a prompt chunk's rows, run in order by each invocation
    c = p.values[x].numel // rows
    wg = wg_size(caps, c, cap=128)
    b = (Binding(x), Binding(w), Binding(step), Binding(y), Binding(hist))
    spec = (wg, c, int(op.attrs["kernel"]), rows)
    return [KernelCall("conv1d_step", spec, b, (3, 4), flat_groups(-(-c // wg)), label=y)]


def gated_delta_step(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    a = op.attrs
    hk, hv, dk, dv = (int(a[n]) for n in ("n_k_heads", "n_v_heads", "k_dim", "v_dim"))
    o = op.outputs[0]
    wg = wg_size(caps, dv, cap=128)  # a column of the head's state each, as many as fit
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [
        KernelCall(
            "gated_delta_step",
            (wg, hk, hv, dk, dv, int(a.get("rows", 1))),
            b,
            (6, 7),
            flat_groups(hv),
            defines=reduce_defines(caps) + ((("V_TILED", "1"),) if int(a.get("v_tiled", 0)) else ()),
            label=o,
        )
    ]

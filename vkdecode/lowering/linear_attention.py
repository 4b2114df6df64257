"""Kernel calls of Qwen3.5's linear-attention ops (fusion/ir.py conv1d_step, gated_delta_step):
one dispatch each, their recurrent state bound as a read-write buffer like a KV cache."""

from __future__ import annotations

from fusion.ir import Op, Program
from vkdecode.lowering.calls import (
    Binding,
    KernelCall,
    KernelCaps,
    flat_groups,
    pow2_at_least,
    reduce_defines,
    wg_size,
)


def conv1d_step(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    x, w, step = op.inputs
    y, hist = op.outputs
    rows = int(op.attrs.get("rows", 1))  # a prompt chunk's rows, run in order by each invocation
    c = p.values[x].numel // rows
    wg = wg_size(caps, c, cap=128)
    b = (Binding(x), Binding(w), Binding(step), Binding(y), Binding(hist))
    spec = (wg, c, int(op.attrs["kernel"]), rows)
    return [KernelCall("conv1d_step", spec, b, (3, 4), flat_groups(-(-c // wg)), label=y)]


# State columns a gated_delta_step workgroup holds in shared memory (DK floats each) at most: a
# head's 128 in 4 workgroups at Qwen3.5's widths, so its 16-64 heads fill more than 16-64 SMs
DELTA_COLS = 32


def delta_columns(dk: int, dv: int, caps: KernelCaps) -> int:
    """Columns of the state a workgroup owns: a power of two up to DELTA_COLS (not past dv's), its
    DK x COLS floats within half the device's shared memory."""
    cols = min(DELTA_COLS, pow2_at_least(dv))
    while cols > 1 and 4 * dk * cols > caps.max_shared // 2:
        cols //= 2
    return cols


def gated_delta_step(p: Program, op: Op, caps: KernelCaps) -> list[KernelCall]:
    a = op.attrs
    hk, hv, dk, dv = (int(a[n]) for n in ("n_k_heads", "n_v_heads", "k_dim", "v_dim"))
    o = op.outputs[0]
    cols = delta_columns(dk, dv, caps)
    # lanes of a column: wg / cols; one on a CPU (lavapipe), where the lanes' sums cost more than
    # they split: a 64-row chunk of the Qwen3.5-27B shape's first 2 (linear) layers, the two calls
    # 657.7 ms a workgroup a head (before), 724.4 at 4 lanes a column, 633.4 at one
    # (bench/results/llvmpipe/2026-12-07-delta-columns)
    wg = cols if caps.device_cpu else max(cols, wg_size(caps, 128, cap=128))
    b = tuple(Binding(v) for v in op.inputs + op.outputs)
    return [
        KernelCall(
            "gated_delta_step",
            (wg, hk, hv, dk, dv, int(a.get("rows", 1)), cols),
            b,
            (6, 7),
            flat_groups(hv * -(-dv // cols)),
            defines=reduce_defines(caps) + ((("V_TILED", "1"),) if int(a.get("v_tiled", 0)) else ()),
            label=o,
        )
    ]

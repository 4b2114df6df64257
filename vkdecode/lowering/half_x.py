"""The tensor-core matmuls' activations as f16, converted once (shaders/to_f16.comp) instead of in
matmul_rows_coop's tile loader, which converts each x element once per weight tile that reads it
(every 64 weight rows; conversions run at an eighth of the f32 rate on NVIDIA). One scratch serves
every matmul, the calls running in order; a repeat conversion of the same x (q, k and v, or an
expert gate and up, read one x) is dropped by drop_repeat_conversions.
"""

from __future__ import annotations

from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps, reduce_defines, wg_size

SCRATCH = "scratch:coop.x16"
ROW_SCALES = "scratch:coop.xscale"
MAX_GROUPS = 4096  # to_f16 is grid-stride: enough workgroups to fill any GPU


def half_x(x: str, n: int, caps: KernelCaps, rows: int = 0) -> tuple[list[KernelCall], Binding, tuple, tuple]:
    """(the conversion calls, the binding the coop matmul reads x through, its defines, the
    bindings it takes after Y) for an x of n f32 elements: to_f16 into the shared scratch, or
    (caps.coop_x16 < 0) x itself as it is. rows > 0: x's rows scaled by powers of two into f16's
    range (ROW_SCALE, whatever caps.coop_x16 says), the factors the matmul multiplies back."""
    if rows:
        call = KernelCall(
            "to_f16",
            (wg_size(caps, 256), n // rows // 4),
            (Binding(x), Binding(SCRATCH), Binding(ROW_SCALES)),
            (1, 2),
            (rows, 1, 1),
            defines=(("ROW_SCALE", "1"),) + reduce_defines(caps),
            scratch=((SCRATCH, 2 * n), (ROW_SCALES, 4 * rows)),
            label=f"{x}.f16",
        )
        return [call], Binding(SCRATCH), (("X_F16", "1"), ("X_ROWSCALE", "1")), (Binding(ROW_SCALES),)
    if caps.coop_x16 < 0:
        return [], Binding(x), (), ()
    wg = wg_size(caps, 256)
    call = KernelCall(
        "to_f16",
        (wg, n // 4),
        (Binding(x), Binding(SCRATCH)),
        (1,),
        (min(MAX_GROUPS, -(-n // (4 * wg))), 1, 1),
        scratch=((SCRATCH, 2 * n),),
        label=f"{x}.f16",
    )
    return [call], Binding(SCRATCH), (("X_F16", "1"),), ()


def drop_repeat_conversions(calls: list[KernelCall], owners: list[int]) -> tuple[list, list]:
    """Without the to_f16 calls that repeat the last one when no call between them wrote its x or
    the scratch (the scratch still holds that x)."""
    out, kept_owners, last = [], [], None
    for call, owner in zip(calls, owners):
        if call.shader == "to_f16":
            if call == last:
                continue
            last = call
        elif last is not None and {call.bindings[i].value for i in call.writes} & {
            b.value for b in last.bindings
        }:
            last = None
        out.append(call)
        kept_owners.append(owner)
    return out, kept_owners

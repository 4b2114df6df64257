"""The RMS norm's inputs from the dispatch before it (shaders/matmul_add.comp NORM_OUT,
shaders/fused_matvec.glsl NORM_PRE).

A fused norm + matvec (q/k/v, gate/up, the lm_head) loads x and norm_w for every element and squares
x for the norm; the matmul_add before it (o-projection or down-projection plus residual; an MoE
layer's moe_matmul_sum_add) writes that x. A peephole over the step's calls lets such a producer
also write x * norm_w and one sum of x^2 per workgroup, and its consumer then loads one vector and
sums those partials.

It pays where the matvecs are wide and it lengthens a latency-bound chain where they are narrow, so
it is on from NORM_PRE_MIN-element vectors. H100, whole fused steps at ctx 1024, on vs off, with the
consumers' 16-byte partial loads: Llama-3.1-8B Q4_K_M (4096) 3580 vs 3730 µs, Llama-3.2-1B F16 (2048)
1200 vs 1215; Qwen3-0.6B F16 (1024) 1097 vs 1096, SmolLM2-135M Q4_1 (576) 725 vs 696
(bench/results/nvidia-h100-80gb-hbm3/2026-11-25-norm-parts/; one float a load, 2026-11-25-norm-pre/: 8B 3661 vs 3704).

The values are the same up to float rounding order: the sum of squares is added up per workgroup,
then over the partials, instead of per invocation over its elements.
"""

from __future__ import annotations

from dataclasses import replace

from fusion.ir import Program
from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps
from vkdecode.quant import K_TYPES, QUANT_TYPES

CONSUMERS = ("rms_norm_matmul", "rms_norm_matmul_silu_mul", "rms_norm_matmul_argmax")
# the residual adds ending in a matvec (shaders/norm_out.glsl): the o- or down projection, and an
# MoE layer's experts' downs with their weighted sum (MOE_MATMUL_SUM_ADD)
PRODUCERS = ("matmul_add", "moe_matmul_sum_add")
NORM_PRE_MIN = 2048  # elements of the normed vector from which caps.norm_pre 0 pairs (above)


def _x_norm(call: KernelCall) -> tuple[int, int] | None:
    """Binding indices of a norm consumer's x and norm weight (None: not a norm consumer)."""
    if call.shader not in CONSUMERS:
        return None
    if call.shader == "rms_norm_matmul_argmax":
        return 0, 1  # fixed in the shader
    d = dict(call.defines)
    if "B_X" not in d or "B_NW" not in d:
        return None
    return int(d["B_X"]), int(d["B_NW"])


def _next_reader(calls: list[KernelCall], start: int, value: str) -> int | None:
    for j in range(start, len(calls)):
        if any(b.value == value for b in calls[j].bindings):
            return j
    return None


def kquant_weights(call: KernelCall) -> bool:
    """Whether a fused matvec reads K-quant weights (a DT_ define, or a slot's DTS_ index)."""
    d = dict(call.defines)
    kq = {str(QUANT_TYPES.index(t)) for t in K_TYPES}
    return any(f"DT_{t.upper()}" in d for t in K_TYPES) or (
        "SLOT_DTYPES" in d and any(k.startswith("DTS_") and v in kq for k, v in d.items())
    )


def late_parts(consumer: KernelCall, caps: KernelCaps) -> bool:
    """Whether the consumer sums the partials after its weight loop (shaders/fused_matvec.glsl
    NORM_PRE_LATE): its K-quant kernels hold 60-72 registers an invocation, and 8 more 16-byte loads
    at the start, before the weight loads, cost occupancy there; f16 kernels (32 registers) lose
    the round trip that loading them late adds. H100, ctx 1024, whole step: Llama-3.1-8B Q4_K_M
    3535 / 3540 vs 3577 / 3578 µs, Llama-3.2-1B F16 1203 vs 1195
    (bench/results/nvidia-h100-80gb-hbm3/2026-11-25-session-f/)."""
    return caps.norm_pre_late > 0 or (caps.norm_pre_late == 0 and kquant_weights(consumer))


def pair(
    producer: KernelCall, consumer: KernelCall, bx: int, bnw: int, n_rows: int, caps: KernelCaps
) -> tuple[KernelCall, KernelCall]:
    """The producer writing x * norm_w and its partials, and the consumer (x and norm weight bound at
    bx, bnw) reading them."""
    x = producer.bindings[producer.writes[0]].value
    xn, parts = f"scratch:{x}.xn", f"scratch:{x}.ss"
    n_parts = producer.groups[0]
    k = len(producer.bindings)
    prod = replace(
        producer,
        bindings=producer.bindings + (consumer.bindings[bnw], Binding(xn), Binding(parts)),
        writes=producer.writes + (k + 1, k + 2),
        defines=producer.defines
        + (("NORM_OUT", "1"), ("NO_NW", str(k)), ("NO_XN", str(k + 1)), ("NO_PART", str(k + 2))),
        scratch=producer.scratch + ((xn, 4 * n_rows), (parts, 4 * n_parts)),
    )
    b = list(consumer.bindings)
    b[bx], b[bnw] = Binding(xn), Binding(parts)
    late = (("NORM_PRE_LATE", "1"),) if late_parts(consumer, caps) else ()
    cons = replace(
        consumer,
        bindings=tuple(b),
        defines=consumer.defines + (("NORM_PRE", "1"), ("N_PARTS", str(n_parts))) + late,
    )
    return prod, cons


def add_norm_pre(
    program: Program, calls: list[KernelCall], owners: list[int], caps: KernelCaps
) -> tuple[list, list]:
    """Peephole: every single-call producer (one row range, a 1-D grid) whose output's next reader
    is a norm consumer taking it as its x (once) is paired with it, where that output has
    NORM_PRE_MIN elements or more (caps.norm_pre 0), always (> 0) or never (< 0). owners are
    returned unchanged: no call is added or removed."""
    if caps.norm_pre < 0:
        return calls, owners
    out = list(calls)
    for i, c in enumerate(calls):
        if c.shader not in PRODUCERS or c.groups[1:] != (1, 1) or any(b.rows is not None for b in c.bindings):
            continue
        x = c.bindings[c.writes[0]].value
        if caps.norm_pre == 0 and program.values[x].numel < NORM_PRE_MIN:
            continue
        j = _next_reader(calls, i + 1, x)
        xb = None if j is None else _x_norm(calls[j])
        if (
            xb is None
            or calls[j].bindings[xb[0]].value != x
            or sum(b.value == x for b in calls[j].bindings) != 1
        ):
            continue
        out[i], out[j] = pair(out[i], out[j], *xb, program.values[x].numel, caps)
    return out, owners

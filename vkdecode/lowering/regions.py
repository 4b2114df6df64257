"""Region -> kernel calls. A region of a rule with a fused kernel lowers to it; any other region (and
every region in no-fuse mode) lowers to its ops' own kernels, so a fused region always equals its ops.

KERNELS pairs each rule of fusion/rules.py with the builder of its fused kernel calls; the rule's
name is written once, in fusion. A builder returns None for shapes its shader does not cover: the
region then runs its ops' kernels (always correct).
"""

from __future__ import annotations

from collections.abc import Callable

from fusion import rules as R
from fusion.ir import Program
from fusion.rules import Region, Rule
from vkdecode.lowering import attention as att
from vkdecode.lowering import gated_norm, moe, moe_chunk, moe_route, sigmoid_gate
from vkdecode.lowering import matvec as mv
from vkdecode.lowering import rows as row_ops
from vkdecode.lowering.ops import KernelCall, KernelCaps, op_calls
from vkdecode.lowering.xplanes import outputs_planes

Builder = Callable[[Program, Region, KernelCaps], "list[KernelCall] | None"]


def _by_rule(pairs: list[tuple[tuple[Rule, ...], Builder]]) -> dict[str, Builder]:
    return {r.name: build for rules, build in pairs for r in rules}


KERNELS: dict[str, Builder] = _by_rule(
    [
        ((R.MATMUL_ADD, R.MATMUL_BIAS_ADD), mv.matmul_add),
        ((R.RMS_NORM_SILU_MUL_MATMUL_ADD,), gated_norm.rms_norm_silu_mul_matmul_add),
        ((R.MATMUL_SIGMOID_SCALE_ADD,), sigmoid_gate.matmul_sigmoid_scale_add),
        ((R.SIGMOID_SCALE_MATMUL_ADD,), sigmoid_gate.sigmoid_scale_matmul_add),
        ((R.RMS_NORM_MATMUL,), mv.rms_norm_matmul),
        # SwiGLU and GeGLU: the same kernel, one define
        (
            (R.RMS_NORM_MATMUL_SILU_MUL, R.RMS_NORM_MATMUL_BIAS_SILU_MUL, R.RMS_NORM_MATMUL_GELU_MUL),
            mv.rms_norm_matmul_silu_mul,
        ),
        ((R.MATMUL_SILU_MUL, R.MATMUL_GELU_MUL), mv.matmul_silu_mul),
        ((R.RMS_NORM_MATMUL_ARGMAX,), mv.rms_norm_matmul_argmax),
        ((R.ROPE_KV_WRITE_ATTENTION, R.QK_NORM_ROPE_KV_WRITE_ATTENTION), att.rope_kv_write_attention),
        # ROWS: over a batched step's rows, writing the x planes too where a matvec reads them (XPLANES,
        # region_calls): H200, GPU ms a step at 2 / 4 / 8 rows, Qwen3-0.6B F16 1.73 / 2.24 / 3.04 apart,
        # 1.67 / 2.12 / 2.95 fused (bench/results/nvidia-h200/2026-11-27-batch-fuse/)
        ((R.ADD_RMS_NORM, R.ADD_RMS_NORM_ROWS, R.ADD_RMS_NORM_CHUNK), att.add_rms_norm),
        (
            (R.ROPE_KV_WRITE_ATTENTION_ROWS, R.QK_NORM_ROPE_KV_WRITE_ATTENTION_ROWS),
            row_ops.fused_attention_rows,
        ),
        ((R.RMS_NORM_ADD,), att.rms_norm_add),
        (
            (R.RMS_NORM_MATMUL_MOE_TOPK_SILU_MUL, R.RMS_NORM_MATMUL_BIAS_MOE_TOPK_BIAS_SWIGLU_CLAMP),
            moe_route.rms_norm_matmul_moe_topk_silu_mul,
        ),
        ((R.RMS_NORM_MATMUL_MOE_TOPK, R.RMS_NORM_MATMUL_BIAS_MOE_TOPK), moe.rms_norm_matmul_moe_topk),
        ((R.MOE_MATMUL_SILU_MUL, R.MOE_MATMUL_BIAS_SWIGLU_CLAMP), moe.moe_matmul_silu_mul),
        ((R.MOE_MATMUL_SUM_ADD, R.MOE_MATMUL_BIAS_SUM_ADD), moe.moe_matmul_sum_add),
        ((R.MOE_MATMUL_BIAS,), moe.moe_matmul_bias),
        # a prompt chunk's (fusion.rules.CHUNK_RULES)
        ((R.MOE_MATMUL_SILU_MUL_CHUNK,), moe_chunk.moe_matmul_silu_mul_chunk),
        ((R.MOE_SUM_ADD_CHUNK,), moe_chunk.moe_sum_add_chunk),
    ]
)


def region_calls(program: Program, region: Region, caps: KernelCaps, fuse: bool = True) -> list[KernelCall]:
    build = KERNELS.get(region.rule) if fuse else None
    if build is not None:
        calls = build(program, region, caps)
        if calls is not None:
            # a batched step's x planes of the region's outputs (lowering/xplanes.py)
            if not program.meta.get("batch_rows") or caps.xplanes < 0:
                return calls
            return outputs_planes(program, region.outputs, calls, caps)
    return [c for i in region.ops for c in op_calls(program, i, caps)]

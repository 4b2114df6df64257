"""Fused kernels of the decode rules, registered into vkdecode.lowering.FUSED.

Each builder maps a Region (its roles and attrs from fusion/rules.py) to the KernelCalls of its
fused shaders, or returns None to fall back to the region's per-op kernels (always correct), for
shapes a fused shader does not cover. Builders live in fused_matvec.py (projections) and
fused_attention.py (norm / rope / kv write / attention, add + norm); the narrow prompt-chunk
forms of the projection rules (*_ROWS, fusion/chunk_rules.py) in kernels_rows_fused.py.
"""
from __future__ import annotations

from vkdecode import fused_attention as att
from vkdecode import fused_matvec as mv
from vkdecode import kernels_rows_fused as rows
from vkdecode.lowering import FUSED

FUSED.update({
    "MATMUL_ADD": mv.matmul_add,
    "MATMUL_BIAS_ADD": mv.matmul_add,
    "RMS_NORM_MATMUL": mv.rms_norm_matmul,
    "RMS_NORM_MATMUL_SILU_MUL": mv.rms_norm_matmul_silu_mul,
    "RMS_NORM_MATMUL_BIAS_SILU_MUL": mv.rms_norm_matmul_silu_mul,
    "MATMUL_SILU_MUL": mv.matmul_silu_mul,
    "RMS_NORM_MATMUL_GELU_MUL": mv.rms_norm_matmul_silu_mul,   # same kernel, GELU define
    "MATMUL_GELU_MUL": mv.matmul_silu_mul,
    "RMS_NORM_MATMUL_ARGMAX": mv.rms_norm_matmul_argmax,
    "ROPE_KV_WRITE_ATTENTION": att.rope_kv_write_attention,
    "QK_NORM_ROPE_KV_WRITE_ATTENTION": att.rope_kv_write_attention,
    "ADD_RMS_NORM": att.add_rms_norm,
    "RMS_NORM_ADD": att.rms_norm_add,
    **rows.BUILDERS,
})

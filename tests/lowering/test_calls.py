"""op_calls over whole decode programs of real model shapes, with no GPU: every call names an
existing shader, binds only program values or scratch it declares, fits the device limits the
caps describe (binding ranges, alignment, workgroup counts and sizes, shared memory)."""

from dataclasses import replace

import pytest

from tests.helpers.paths import SHADERS
from vkdecode.lowering.calls import KernelCaps, row_bytes
from vkdecode.lowering.ops import op_calls
from vkdecode.models import build_program
from vkdecode.models.config import ModelArgs

LAVAPIPE = KernelCaps(
    subgroup_size=8,
    subgroup_arithmetic=True,
    max_storage_range=128 << 20,
    max_invocations=1024,
    max_shared=32768,
    min_align=16,
)
NVIDIA = KernelCaps(
    subgroup_size=32,
    subgroup_arithmetic=True,
    max_storage_range=(1 << 32) - 1,
    max_invocations=1024,
    max_shared=49152,
    min_align=16,
)
AMD = KernelCaps(
    subgroup_size=64,
    subgroup_arithmetic=False,
    max_storage_range=(1 << 32) - 1,
    max_invocations=1024,
    max_shared=32768,
    min_align=256,
)
CAPS = {"lavapipe": LAVAPIPE, "nvidia": NVIDIA, "amd-nosubgroup": AMD}

MODELS = {  # arch, vocab, hidden, ffn, layers (cut to 2), heads, kv heads, head_dim, matrix dtype
    "smollm2-135m-q4_1": ("llama", 49152, 576, 1536, 9, 3, 64, "q4_1"),
    "qwen2-0.5b-q8_0": ("qwen2", 151936, 896, 4864, 14, 2, 64, "q8_0"),
    "qwen3-0.6b-f16": ("qwen3", 151936, 1024, 3072, 16, 8, 128, "f16"),
    "qwen3-0.6b-q5_0": ("qwen3", 151936, 1024, 3072, 16, 8, 128, "q5_0"),
}


def _program(name: str, ctx: int):
    arch, vocab, hidden, ffn, h, kvh, hd, dtype = MODELS[name]
    args = ModelArgs(
        arch=arch,
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        n_layers=2,
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=hd,
        rms_eps=1e-6,
        rope_theta=1e6,
        max_position=ctx,
        tie_embeddings=True,
        attention_bias=arch == "qwen2",
        qk_norm=arch == "qwen3",
    )
    p = build_program(args, ctx)
    mats = {n: dtype for n, v in p.values.items() if v.kind == "weight" and len(v.shape) == 2}
    return build_program(args, ctx, mats)


@pytest.mark.parametrize("ctx", [256, 8192])
@pytest.mark.parametrize("caps_name", list(CAPS))
@pytest.mark.parametrize("model", list(MODELS))
def test_calls_fit_device(model, caps_name, ctx):
    caps = CAPS[caps_name]
    p = _program(model, ctx)
    for i, op in enumerate(p.ops):
        calls = op_calls(p, i, caps)
        assert calls, f"op #{i} {op.kind}: no calls"
        written: set[str] = set()
        for c in calls:
            where = f"op #{i} {op.kind} -> {c.shader} {c.label}"
            assert (SHADERS / f"{c.shader}.comp").exists(), where
            wg = c.spec[0]
            assert wg & (wg - 1) == 0 and 1 <= wg <= min(caps.max_invocations, 1024), where
            assert all(1 <= g <= 65535 for g in c.groups), where
            scratch = dict(c.scratch)
            for j, b in enumerate(c.bindings):
                if b.value.startswith("scratch:"):
                    assert b.value in scratch, where
                    continue
                v = p.values[b.value]
                if j in c.writes:
                    assert b.value in op.outputs, f"{where}: writes {b.value}"
                if v.kind == "weight" and len(v.shape) == 2:
                    rb = row_bytes(v.dtype, v.shape[1], b.part)
                    rows = v.shape[0] - b.row_start if b.rows is None else b.rows
                    assert (b.row_start * rb) % caps.min_align == 0, where
                    assert rows * rb <= caps.max_storage_range, where
                else:
                    assert v.numel * 4 <= caps.max_storage_range, where
            # a later call of the op touches what an earlier one wrote (the executor's barrier cue)
            assert not written or written & {b.value for b in c.bindings}, where
            written |= {c.bindings[j].value for j in c.writes}
        assert set(op.outputs) <= written, f"op #{i} {op.kind}: outputs never written"


def test_lm_head_split_on_lavapipe():
    """Qwen3's tied 151936 x 1024 f16 table (311 MB) exceeds lavapipe's 128 MiB binding limit."""
    p = _program("qwen3-0.6b-f16", 256)
    i = next(
        i for i, op in enumerate(p.ops) if op.kind == "matmul" and p.values[op.inputs[0]].shape[0] == 151936
    )
    calls = op_calls(p, i, LAVAPIPE)
    assert len(calls) == 3
    assert sum(c.bindings[0].rows for c in calls) == 151936
    assert len(op_calls(p, i, NVIDIA)) == 1
    e = next(i for i, op in enumerate(p.ops) if op.kind == "embed")
    assert len(op_calls(p, e, LAVAPIPE)) == 3


def test_attention_split_count():
    p = _program("qwen3-0.6b-f16", 8192)
    i = next(i for i, op in enumerate(p.ops) if op.kind == "attention")
    split, combine = op_calls(p, i, NVIDIA)
    assert split.groups == (32, 16, 1) and combine.groups == (16, 1, 1)
    assert split.bindings[4] == combine.bindings[0]
    assert len(op_calls(p, i, replace(NVIDIA, attn_max_chunk=8192))) == 1


def _info(device_type: str, subgroup: int):
    from types import SimpleNamespace

    return SimpleNamespace(
        device_type=device_type,
        features={
            "subgroup_size": subgroup,
            "subgroup_arithmetic": True,
            "min_subgroup_size": subgroup,
            "max_subgroup_size": subgroup,
        },
        limits={
            "max_storage_buffer_range": 1 << 27,
            "max_workgroup_invocations": 1024,
            "max_shared_memory": 32768,
            "min_storage_buffer_offset_alignment": 16,
        },
    )


def test_cpu_caps_pick_cpu_shapes_gpus_keep_automatic():
    """lavapipe (device_type cpu) gets its measured launch shapes (16-lane matvecs of 16 rows,
    32-lane fused attention, one split per head, one lm_head block per workgroup, whole
    wide K-quant units, the lm_head region as its ops); a GPU keeps every knob automatic;
    an explicit tuning wins on both."""
    from vkdecode.lowering.calls import matvec_shape

    cpu, gpu = KernelCaps.from_info(_info("cpu", 8)), KernelCaps.from_info(_info("discrete_gpu", 32))
    knobs = ("matvec_wg", "matvec_rows", "attn_wg", "attn_splits", "head_blocks", "kw_split", "head_ops")
    assert [getattr(cpu, k) for k in knobs] == [16, 16, 32, 1, 1, -1, True]
    assert [getattr(gpu, k) for k in knobs] == [0] * 6 + [False]
    assert matvec_shape("q4_1", 576, 1536, cpu)[:2] == (16, 16)
    assert matvec_shape("q4_1", 576, 1536, gpu)[:2] == (128, 2)
    assert KernelCaps.from_info(_info("cpu", 8), matvec_wg=0, attn_wg=64).attn_wg == 64


def test_kw_split_up_to_4096_wide_rows_on_gpus():
    """GPUs split wide q4_k / q6_k units (kwide_rows.glsl) up to 4096-wide rows, and the split q4_k
    matvecs from 4096 rows take 4 rows of 64 lanes (8 of 128 on wider rows with kw_split=1); the
    14336-wide downs keep whole units (without kw_balance: 2 rows of 128 lanes); KW_JOINT marks whole units."""
    from vkdecode.lowering.calls import kw_split, matvec_shape, wvec_defines

    gpu = KernelCaps.from_info(_info("discrete_gpu", 32))
    assert kw_split(4096, gpu) and not kw_split(14336, gpu) and not kw_split(4096, replace(gpu, kw_split=-1))
    assert matvec_shape("q4_k", 4096, 14336, gpu)[:2] == (64, 4)
    assert matvec_shape("q4_k", 14336, 4096, replace(gpu, kw_balance=-1))[:2] == (128, 2)
    assert matvec_shape("q4_k", 14336, 4096, replace(gpu, kw_split=1))[:2] == (128, 8)
    assert matvec_shape("q6_k", 4096, 14336, gpu)[:2] == (64, 2)
    assert ("KW_JOINT", "1") not in wvec_defines(True, gpu, 4096)
    assert ("KW_JOINT", "1") in wvec_defines(True, gpu, 14336)
    assert wvec_defines(False, gpu, 14336) == ()


def test_kq_idot_splits_q4_k_and_q6_k_at_every_width():
    """With accelerated integer dot products (caps.integer_dot_fast) split q4_k and q6_k units take
    them (KQ_IDOT, and KQ_IDOT_Q6 for q6_k) and split at every width: the 14336-wide q4_k downs in 4
    rows of 128 lanes, the q6_k ones in 4 rows of 224; kq_idot_q6 < 0 keeps q6_k in floats (whole
    units at 14336); kq_idot < 0 or no integer dot products: as before."""
    from vkdecode.lowering.calls import kq_idot, kw_split, matvec_shape, wvec_defines

    gpu = KernelCaps.from_info(_info("discrete_gpu", 32))
    assert not gpu.integer_dot and not kq_idot(gpu) and not kq_idot(replace(gpu, kq_idot=1))
    idot = replace(gpu, integer_dot=True, integer_dot_fast=True)
    no6 = replace(idot, kq_idot_q6=-1)
    assert (
        kq_idot(idot)
        and kq_idot(idot, "q6_k")
        and not kq_idot(idot, "q5_k")
        and not kq_idot(replace(idot, kq_idot=-1))
    )
    assert kq_idot(no6) and not kq_idot(no6, "q6_k")
    # emulated dot products (the driver's Accelerated properties false): only when asked for
    assert not kq_idot(replace(idot, integer_dot_fast=False)) and kq_idot(
        replace(idot, integer_dot_fast=False, kq_idot=1)
    )
    assert kw_split(14336, idot, "q4_k") and kw_split(14336, idot, "q6_k") and not kw_split(14336, idot)
    assert not kw_split(14336, no6, "q6_k") and kw_split(14336, no6, "q4_k")
    assert not kw_split(14336, replace(idot, kq_idot=-1), "q4_k") and not kw_split(
        14336, replace(idot, kw_split=-1), "q4_k"
    )
    assert matvec_shape("q4_k", 14336, 4096, idot)[:2] == (128, 4)
    assert matvec_shape("q6_k", 14336, 4096, idot)[:2] == (224, 4)
    assert matvec_shape("q6_k", 14336, 4096, no6)[:2] == (224, 2)  # kw_balance, whole units in floats
    assert ("KQ_IDOT", "1") in wvec_defines(True, idot, 14336, "q4_k")
    assert ("KQ_IDOT_Q6", "1") not in wvec_defines(True, idot, 14336, "q4_k")
    assert {("KQ_IDOT", "1"), ("KQ_IDOT_Q6", "1")} <= set(wvec_defines(True, idot, 4096, ""))  # mixed slots
    assert {("KQ_IDOT", "1"), ("KQ_IDOT_Q6", "1")} <= set(wvec_defines(True, idot, 4096, "q6_k"))
    assert ("KQ_IDOT", "1") not in wvec_defines(True, no6, 4096, "q6_k")
    assert ("KQ_IDOT", "1") not in wvec_defines(True, gpu, 4096, "q4_k")
    assert ("KW_JOINT", "1") in wvec_defines(True, no6, 14336, "q6_k")
    info = _info("discrete_gpu", 32)
    info.features["integer_dot"] = True
    assert KernelCaps.from_info(info).integer_dot and not KernelCaps.from_info(info).integer_dot_fast
    info.features["integer_dot_fast"] = True
    assert KernelCaps.from_info(info).integer_dot_fast


def test_kw_balance_takes_two_units_a_lane_on_14336_wide_rows():
    """The 8B's downs (448 wide units a row) take 224 lanes, 7 subgroups of 2 units each (q4_k 4
    rows, q6_k 2), not 128 lanes of 3.5; power-of-two unit counts, narrow rows, devices without
    subgroup arithmetic (shared-memory trees need a power of two) and CPUs keep their shapes."""
    from vkdecode.lowering.calls import kw_balanced, matvec_shape

    gpu, cpu = KernelCaps.from_info(_info("discrete_gpu", 32)), KernelCaps.from_info(_info("cpu", 8))
    assert matvec_shape("q4_k", 14336, 4096, gpu)[:2] == (224, 4)
    assert matvec_shape("q6_k", 14336, 4096, gpu)[:2] == (224, 2)
    assert matvec_shape("q4_k", 10240, 4096, gpu)[:2] == (160, 4)  # 320 units
    assert matvec_shape("q4_k", 14336, 1024, gpu)[:2] == (128, 2)  # too few rows
    assert [kw_balanced(u, gpu) for u in (128, 192, 256, 320, 384, 448, 512)] == [False] * 3 + [
        True,
        False,
        True,
        False,
    ]
    assert not kw_balanced(448, replace(gpu, subgroup_arithmetic=False))
    assert not kw_balanced(448, replace(gpu, kw_balance=-1)) and cpu.kw_balance == -1
    assert not kw_balanced(448, replace(gpu, subgroup_size=64))  # 224 lanes: 3.5 subgroups of 64

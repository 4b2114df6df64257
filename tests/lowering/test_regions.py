"""Fused region kernels against the numpy reference, through whole tiny models in fused replay.

Every case decodes from position 0 to the last context position: logits within LIMIT of a float64
reference at every step, the GPU's greedy token equal to the unfused executor's and to the argmax
of the logits it wrote. Cases cover llama / qwen2 (biases) / qwen3 (qk-norm), every weight dtype
(GGUF files written by make_models.write_gguf), head_dim 16 / 64 / 128, hidden 64 / 96, split-K
attention with 1 to 5 splits (combined by the o-projection as it loads them, or, for a head_dim
that is no multiple of 4, by the attention_combine dispatch), lm_head row chunks, and both
reduction paths (subgroup arithmetic on and forced off). Ids: `fused-<arch>-<dtype>-<shape>-<path>-ctx<n>`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tests.helpers.make_models import models_dir as _models_dir
from tests.helpers.make_models import tiny_hf_model, write_gguf
from tests.helpers.paths import ROOT

# Weights are the same dequantised values on both sides, so what is left is f32 rounding (the
# fused kernels also reassociate the norm: rms^-1 * W (x * w)); observed ~1e-6. CASES run with f32
# KV caches to hold the kernels to that.
LIMIT = 1e-4
# f16 caches: the reference rounds its float64 k, v to f16 and the GPU its f32 ones; a value near
# a rounding boundary then lands one f16 ulp (2^-11 relative) apart, observed to move the logits
# by ~2e-4 relative for one such element in these tiny models (weights std 0.3).
LIMIT_F16_KV = 2e-3


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return _models_dir(tmp_path_factory)


def _model(models, arch: str, dtype: str, ctx: int, kv: str = "f32", **over):
    from vkdecode.models.loader import load_model

    hf = tiny_hf_model(arch, models, **over)
    if dtype == "f32":
        return load_model(hf, ctx=ctx, kv_dtype=kv)
    tag = "-".join(f"{k}{v}" for k, v in sorted(over.items()))
    return load_model(
        write_gguf(hf, Path(models) / f"{arch}-{tag}.{dtype}.gguf", dtype), ctx=ctx, kv_dtype=kv
    )


def _caps(device, path: str, **tuning):
    """The device's caps with the fused lm_head kernel (CPUs run that region's ops by default:
    test_fused_head_ops) and `path`'s reductions."""
    from vkdecode.lowering.calls import KernelCaps

    tuning.setdefault("cx_rows", 0)  # the o-projection combines split attention, as on GPUs
    caps = KernelCaps.from_info(device.info, **{"head_ops": False, **tuning})
    if path == "smem":
        return replace(caps, subgroup_arithmetic=False)
    if not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    return caps


def decode_and_compare(device, m, caps, prompt=(1, 7, 42), limit=LIMIT):
    """Fused vs reference (every step) and vs unfused (tokens), from pos 0 to the last position.
    Returns the fused executor's items (closed) for dispatch counting."""
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.executors.unfused import UnfusedExecutor
    from vkdecode.reference import Reference

    ref = Reference(m.program, m.weights, dtype=np.float64)
    fused = ReplayExecutor(device, m.program, m.weights, caps=caps, fuse=True)
    unfused = UnfusedExecutor(device, m.program, m.weights, caps=caps)
    try:
        tok = prompt[0]
        for pos in range(m.ctx):
            want = ref.step(tok, pos)["logits"]
            got_tok = fused.step(tok, pos)
            got = fused.read_logits()
            err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
            assert err <= limit, f"pos {pos}: logits rel err {err:.3g} > {limit:g}"
            assert got_tok == int(np.argmax(got)), f"pos {pos}: token is not the argmax of the logits"
            assert unfused.step(tok, pos) == got_tok, f"pos {pos}: fused and unfused tokens differ"
            tok = prompt[pos + 1] if pos + 1 < len(prompt) else got_tok
        # the executor's token hand-off, where it takes a dispatch of its own, is not lowered
        return [it for it in fused.items if it.call.shader != "advance_step"], fused.regions
    finally:
        fused.close()
        unfused.close()


SHAPES = {  # name -> tiny_hf_model overrides (hidden, heads, head_dim, ffn)
    "h64d16": {},
    "h96d64": {
        "hidden_size": 96,
        "num_attention_heads": 3,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "intermediate_size": 160,
    },
    "h64d128": {
        "hidden_size": 64,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "head_dim": 128,
        "intermediate_size": 128,
    },
    "h96d32": {
        "hidden_size": 96,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 96,
    },
    # head_dim not a multiple of 4: the scalar (non-vec4) attention paths; f32/f16 only (wo's
    # in-dim 72 is no whole number of quant blocks)
    # whole 256-superblocks for every in-dim: the K-quant cases
    "h256d64": {
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
    },
    "h96d24": {
        "hidden_size": 96,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 24,
        "intermediate_size": 96,
    },
    "h64d18": {
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 18,
        "intermediate_size": 96,
    },
}

# (arch, dtype, shape, path, ctx, attn_max_chunk): every arch x both paths at f32, then each
# quantised dtype on another arch and shape
CASES = [
    ("llama", "f32", "h64d16", "sg", 24, 256),
    ("llama", "f32", "h64d16", "smem", 40, 16),
    ("qwen2", "f32", "h96d64", "sg", 40, 16),
    ("qwen2", "f32", "h96d64", "smem", 24, 256),
    ("qwen3", "f32", "h64d128", "sg", 40, 16),
    ("qwen3", "f32", "h64d128", "smem", 33, 8),
    ("llama", "f16", "h96d32", "sg", 32, 8),  # 4 splits
    ("qwen3", "f16", "h96d32", "smem", 24, 256),
    ("llama", "q4_1", "h96d64", "sg", 40, 16),
    ("qwen2", "q8_0", "h64d16", "smem", 40, 16),
    ("qwen3", "q4_0", "h96d32", "sg", 33, 8),
    ("qwen2", "q5_0", "h64d128", "smem", 24, 256),
    ("llama", "q8_0", "h64d128", "sg", 24, 256),
    ("qwen3", "q4_1", "h64d16", "smem", 24, 256),
    ("llama", "f32", "h64d18", "sg", 20, 8),
    ("qwen3", "f16", "h64d18", "smem", 20, 256),
    ("qwen2", "f32", "h96d32", "sg", 32, 16),  # 2 splits
    ("llama", "q4_k", "h256d64", "sg", 20, 8),
    ("qwen3", "q5_k", "h256d64", "smem", 20, 256),
    ("qwen2", "q6_k", "h256d64", "sg", 20, 256),
    ("qwen3", "q6_k", "h256d64", "smem", 17, 8),
    ("llama", "q5_1", "h96d32", "smem", 24, 8),
    ("qwen3", "iq4_nl", "h64d16", "sg", 24, 256),
    ("llama", "mxfp4", "h96d32", "sg", 24, 8),
    ("qwen2", "q3_k", "h256d64", "smem", 17, 256),
    ("llama", "q2_k", "h256d64", "sg", 17, 8),
]


@pytest.mark.parametrize(
    "arch,dtype,shape,path,ctx,chunk",
    [pytest.param(*c, id=f"fused-{c[0]}-{c[1]}-{c[2]}-{c[3]}-ctx{c[4]}") for c in CASES],
)
def test_fused_model(device, models, arch, dtype, shape, path, ctx, chunk):
    m = _model(models, arch, dtype, ctx, **SHAPES[shape])
    caps = _caps(device, path, attn_max_chunk=chunk)
    items, regions = decode_and_compare(device, m, caps)
    from vkdecode.lowering.attention import attention_grid

    fused_rules = {r.rule for r in regions if r.rule}
    assert {
        "RMS_NORM_MATMUL",
        "MATMUL_ADD",
        "RMS_NORM_MATMUL_SILU_MUL",
        "RMS_NORM_MATMUL_ARGMAX",
    } <= fused_rules
    # fused: 5 dispatches per layer, embed, 2 at the end; split-K attention adds a combine dispatch
    # only when the o-projection cannot combine the partials itself (head_dim not a multiple of 4)
    splits = attention_grid(ctx, m.args.head_dim, caps)[0]
    combine = splits > 1 and m.args.head_dim % 4 != 0
    shaders = [it.call.shader for it in items]
    assert len(items) == m.args.n_layers * (5 + combine) + 3, shaders
    assert shaders.count("attention_combine") == combine * m.args.n_layers
    # the subgroup-rows attention wherever it fits (subgroup path, head_dim a multiple of the
    # subgroup size), the workgroup form otherwise
    from vkdecode.lowering.attention import ATTN_WG_SG, subgroup_rows
    from vkdecode.lowering.calls import wg_size

    sg = subgroup_rows(m.args.head_dim, wg_size(caps, ATTN_WG_SG, cap=1024), caps)
    assert {sh for sh in shaders if sh.startswith("rope_kv")} == {"rope_kv_write_attention" + "_sg" * sg}
    combining = [it for it in items if ("COMBINE_X", "1") in it.call.defines]
    assert len(combining) == (splits > 1 and not combine) * m.args.n_layers
    assert all(it.call.shader == "matmul_add" for it in combining)


# f16 KV caches (the default of vkdecode.load): pairs and neox RoPE, both attention kernels, split
# and not, head_dim 18 (scalar cache loads), and the Q4_K_M mix
CASES_F16_KV = [
    ("llama", "f32", "h64d16", "sg", 24, 256),
    ("qwen3", "f16", "h96d32", "smem", 24, 8),
    ("qwen2", "f32", "h96d64", "sg", 40, 16),
    ("qwen3", "f32", "h64d18", "smem", 20, 8),
    ("llama", "f32", "h64d18", "sg", 20, 256),
    ("qwen3", "q4_k_m", "h256d64", "sg", 20, 8),
    ("llama", "f32", "h96d24", "sg", 20, 256),  # 3 elements per lane (8 lanes): no sg kernel with f16
]


@pytest.mark.parametrize(
    "arch,dtype,shape,path,ctx,chunk",
    [pytest.param(*c, id=f"fused-f16kv-{c[0]}-{c[1]}-{c[2]}-{c[3]}-ctx{c[4]}") for c in CASES_F16_KV],
)
def test_fused_model_f16_kv(device, models, arch, dtype, shape, path, ctx, chunk):
    m = _model(models, arch, dtype, ctx, kv="f16", **SHAPES[shape])
    assert {m.program.values[n].dtype for n in m.program.values if n.endswith("_cache")} == {"f16"}
    caps = _caps(device, path, attn_max_chunk=chunk)
    items, _ = decode_and_compare(device, m, caps, limit=LIMIT_F16_KV)
    att = {it.call.shader for it in items if it.call.shader.startswith("rope_kv")}
    assert all(("KV_F16", "1") in it.call.defines for it in items if it.call.shader.startswith("rope_kv"))
    # the subgroup-rows kernel wherever it fits and each lane writes whole f16 words (even EPL)
    from vkdecode.lowering.attention import ATTN_WG_SG, subgroup_rows
    from vkdecode.lowering.calls import wg_size

    d, lanes = m.args.head_dim, caps.subgroup_size
    sg = subgroup_rows(d, wg_size(caps, ATTN_WG_SG, cap=1024), caps) and (d // lanes) % 2 == 0
    assert att == {"rope_kv_write_attention" + "_sg" * sg}


def test_fused_cases_cover_splits():
    """No GPU: the cases above run the fused attention with 1 to 5 splits, combined by the
    o-projection and (head_dim 18) by the combine dispatch."""
    from vkdecode.lowering.attention import attention_grid
    from vkdecode.lowering.calls import KernelCaps

    def splits(c):
        caps = KernelCaps(
            subgroup_size=32,
            subgroup_arithmetic=True,
            max_storage_range=128 << 20,
            max_invocations=1024,
            max_shared=49152,
            min_align=64,
            attn_max_chunk=c[5],
            attn_splits=1,
        )  # as KernelCaps.from_info sets it on lavapipe
        return attention_grid(c[4], SHAPES[c[2]].get("head_dim", 16), caps)[0]

    assert {splits(c) for c in CASES} == {1, 2, 3, 4, 5}
    assert any(splits(c) > 1 for c in CASES if SHAPES[c[2]].get("head_dim", 16) % 4)
    # both attention kernels, split and not, on the subgroup path with lavapipe's 8 lanes
    d = {c: SHAPES[c[2]].get("head_dim", 16) for c in CASES if c[3] == "sg"}
    assert {(dd % 8 == 0, splits(c) > 1) for c, dd in d.items()} == {
        (True, True),
        (True, False),
        (False, True),
    }


@pytest.mark.parametrize("arch,shape,ctx", [("llama", "h64d16", 40), ("qwen3", "h64d128", 36)])
def test_fused_sg_attention_several_batches(device, models, arch, shape, ctx):
    """The subgroup-rows attention with more rows per subgroup than one batch holds: a 16-wide
    workgroup (2 subgroups of lavapipe's 8 lanes, RB = 8) and one split take 16 rows per batch,
    so the context's later rows come from the loop's later batches, not the prefetched first."""
    from vkdecode.lowering.attention import attention_grid

    m = _model(models, arch, "f32", ctx, **SHAPES[shape])
    caps = _caps(device, "sg", attn_wg=16, attn_splits=1, attn_max_chunk=1024)
    if caps.subgroup_size != 8 or not caps.subgroup_fixed:
        pytest.skip("sized for 8-lane subgroups (lavapipe)")
    assert attention_grid(ctx, m.args.head_dim, caps)[0] == 1
    items, _ = decode_and_compare(device, m, caps)
    att = [it.call for it in items if it.call.shader.startswith("rope_kv")]
    assert {c.shader for c in att} == {"rope_kv_write_attention_sg"}
    assert all(c.spec[0] == 16 and ("RB", "8") in c.defines for c in att)


@pytest.mark.parametrize("path", ["sg", "smem"])
def test_fused_lm_head_row_chunks(device, models, path):
    """lm_head (and the embedding) beyond maxStorageBufferRange: bound as 256-row chunks."""
    m = _model(models, "llama", "f32", 12)
    caps = replace(_caps(device, path), max_storage_range=64 << 10)  # 300 x 64 f32 = 75 KiB
    items, _ = decode_and_compare(device, m, caps)
    assert [it.call.shader for it in items].count("rms_norm_matmul_argmax") == 2


# (path, matvec_wg, matvec_rows, argmax partials, head_blocks): vocab 300 in blocks of 3 / 16 / 33
# rows (the last block ragged), one block per workgroup (BLOCKS == 1, lavapipe's default) or several
# (from ARGMAX_PARTIALS as on GPUs, or head_blocks), the last workgroup taking fewer
LM_HEAD_BLOCKS = [
    ("sg", 8, 3, 4096, 0),
    ("sg", 16, 16, 4, 0),
    ("smem", 16, 16, 4096, 0),
    ("smem", 8, 3, 7, 0),
    ("sg", 64, 33, 3, 0),
    ("sg", 16, 16, 4096, 3),
    ("smem", 8, 3, 4, 1),
]


@pytest.mark.parametrize(
    "path,wg,rows,partials,blocks",
    [
        pytest.param(*c, id=f"lm-head-{c[0]}-wg{c[1]}-rows{c[2]}-pairs{c[3]}-blocks{c[4]}")
        for c in LM_HEAD_BLOCKS
    ],
)
def test_fused_lm_head_blocks(device, models, monkeypatch, path, wg, rows, partials, blocks):
    """rms_norm_matmul_argmax with one row block per workgroup (a spec-constant branch without the
    block loop, which lavapipe runs 1.6x slower) and with several: logits and token as the reference."""
    from vkdecode.lowering import matvec as fused_matvec

    monkeypatch.setattr(fused_matvec, "ARGMAX_PARTIALS", partials)
    m = _model(models, "llama", "q4_1", 10, **SHAPES["h96d32"])
    caps = _caps(device, path, matvec_wg=wg, matvec_rows=rows, head_blocks=blocks)
    items, _ = decode_and_compare(device, m, caps)
    head = [it.call for it in items if it.call.shader == "rms_norm_matmul_argmax"]
    n_blocks = -(-m.args.vocab_size // rows)
    per = blocks or max(1, -(-n_blocks // partials))
    assert [c.spec[0::2] for c in head] == [(wg, rows, m.args.vocab_size)]
    assert head[0].spec[5] == per and head[0].groups[0] == -(-n_blocks // per)
    assert (per > 1) == (blocks > 1 or (blocks == 0 and partials < n_blocks))


@pytest.mark.parametrize("path", ["sg", "smem"])
def test_fused_head_ops(device, models, path):
    """head_ops (CPU devices' default): the final norm + lm_head + argmax region runs its ops'
    kernels inside the fused step; logits and tokens as the reference and the unfused executor."""
    m = _model(models, "qwen2", "q4_1", 12, **SHAPES["h96d32"])
    items, regions = decode_and_compare(device, m, _caps(device, path, head_ops=True))
    head = [it.call.shader for it in items if regions[it.region].rule == "RMS_NORM_MATMUL_ARGMAX"]
    assert head == ["rms_norm", "matmul", "argmax", "argmax"]
    assert len(items) == 5 * m.args.n_layers + 5


# GPU default shapes (matvec and attention workgroups, rows, splits chosen as on a GPU) still run
# on lavapipe, whose own defaults (KernelCaps.from_info, device_type cpu) differ
GPU_SHAPE_CASES = [
    ("llama", "q4_1", "h96d64", "sg", 24),
    ("qwen3", "f16", "h64d128", "smem", 20),
    ("qwen2", "f32", "h96d32", "sg", 20),
]


@pytest.mark.parametrize(
    "arch,dtype,shape,path,ctx",
    [pytest.param(*c, id=f"gpu-shapes-{c[0]}-{c[1]}-{c[2]}-{c[3]}") for c in GPU_SHAPE_CASES],
)
def test_fused_model_gpu_shapes(device, models, arch, dtype, shape, path, ctx):
    m = _model(models, arch, dtype, ctx, **SHAPES[shape])
    caps = _caps(device, path, matvec_wg=0, matvec_rows=0, attn_wg=0, attn_splits=0)
    items, _ = decode_and_compare(device, m, caps)
    from vkdecode.lowering.calls import matvec_shape

    lanes = []
    for c in [it.call for it in items if it.call.shader == "matmul_add"]:
        rows, k = m.program.values[c.bindings[0].value].shape
        assert c.spec[0] == matvec_shape(dtype, k, rows, caps)[0]
        lanes.append(c.spec[0])
    assert max(lanes) > 16  # not lavapipe's 16 lanes throughout
    att = [it.call for it in items if it.call.shader.startswith("rope_kv")]
    assert all(c.spec[0] >= 256 for c in att)  # fused_attention.ATTN_WG(_SG), not lavapipe's 32


@pytest.mark.parametrize("v_dtype,dispatches", [("q8_0", 1), ("mxfp4", 1), ("f16", 2)])
@pytest.mark.parametrize("path", ["sg", "smem"])
def test_fused_mixed_dtypes(device, models, path, v_dtype, dispatches):
    """q/k/v of different dtypes (GGUF mixes do this): quant dtypes share one rms_norm_matmul
    dispatch, each slot decoding its own (SLOT_DTYPES); a float dtype takes a dispatch of its own."""
    from vkdecode.models import build_program
    from vkdecode.quant import quantize

    base = _model(models, "qwen2", "f32", 16, **SHAPES["h96d32"])
    dtypes = {
        n: (v_dtype if n.endswith((".wv", ".w_down")) else "q4_1")
        for n, w in base.weights.items()
        if len(w.shape) == 2
    }
    weights = {n: quantize(w.dequantize(), dtypes[n]) if n in dtypes else w for n, w in base.weights.items()}
    program = build_program(base.args, base.ctx, {n: w.dtype for n, w in weights.items()})
    m = replace(base, program=program, weights=weights)
    items, _ = decode_and_compare(device, m, _caps(device, path))
    assert [it.call.shader for it in items].count("rms_norm_matmul") == dispatches * m.args.n_layers


def test_slot_dtype_codes_match_quant_types():
    """No GPU: fused_wslot.glsl's DTS_<slot> codes are the indices of vkdecode.quant.QUANT_TYPES."""
    import re

    from vkdecode.quant import QUANT_TYPES

    src = (ROOT / "shaders" / "fused_wslot.glsl").read_text()
    codes = re.findall(r"SLOT_DT == (\d+)\n#define DT_(\w+) 1", src)
    assert [(int(i), n.lower()) for i, n in codes] == list(enumerate(QUANT_TYPES))


# rules that only fire when the default ones before them are left out
SUBSET = ["ADD_RMS_NORM", "MATMUL_SILU_MUL", "QK_NORM_ROPE_KV_WRITE_ATTENTION", "ROPE_KV_WRITE_ATTENTION"]


@pytest.mark.parametrize(
    "arch,dtype,path", [("llama", "q4_0", "sg"), ("qwen3", "f32", "smem"), ("qwen2", "f16", "sg")]
)
def test_fused_rule_subset(device, models, monkeypatch, arch, dtype, path):
    from vkdecode.executors import replay

    m = _model(models, arch, dtype, 20, **SHAPES["h96d32"])
    orig = replay.ReplayExecutor.__init__
    monkeypatch.setattr(
        replay.ReplayExecutor, "__init__", lambda self, *a, **kw: orig(self, *a, **{**kw, "rules": SUBSET})
    )
    items, _ = decode_and_compare(device, m, _caps(device, path))
    shaders = [it.call.shader for it in items]
    assert shaders.count("add_rms_norm") == 2 * m.args.n_layers
    assert shaders.count("matmul_silu_mul") == m.args.n_layers


@pytest.mark.parametrize("spec", ["smollm2-135m", "qwen2-0.5b", "qwen3-0.6b"])
@pytest.mark.parametrize("ctx", [256, 4096])
def test_fused_dispatches_per_layer(spec, ctx):
    """No GPU: real model shapes lower to 5 dispatches per layer (+ split-K attention's combine where
    the o-projection does not absorb it), and a 151936-row f16 lm_head beyond lavapipe's 128 MiB binding
    runs as row chunks + one final."""
    from fusion.partition import partition
    from tests.fusion.programs import SPECS, build
    from vkdecode.lowering.attention import absorb_combines, attention_grid
    from vkdecode.lowering.calls import KernelCaps
    from vkdecode.lowering.regions import region_calls

    caps = KernelCaps(
        subgroup_size=32,
        subgroup_arithmetic=True,
        max_storage_range=128 << 20,
        max_invocations=1024,
        max_shared=49152,
        min_align=64,
    )
    s = next(s for s in SPECS if s.name == spec).with_(ctx=ctx)
    p = build(s, n_layers=2)
    lowered = [c for r in partition(p) for c in region_calls(p, r, caps)]
    calls, _ = absorb_combines(p, lowered, list(range(len(lowered))), caps)
    head = [c for c in calls if c.shader == "rms_norm_matmul_argmax"]
    split = attention_grid(ctx, s.head_dim, caps)[0] > 1
    assert [c.shader for c in lowered].count("attention_combine") == 2 * split
    embed = [c for c in calls if c.shader == "embed"]  # chunked like the head when tied
    # a combine stays its own dispatch where absorbing it would not pay (fused_attention.CX_ABSORB_MAX)
    kept = [c.shader for c in calls].count("attention_combine")
    assert kept in (0, 2 * split) and (spec != "smollm2-135m" or kept == 0)
    assert len(calls) == 2 * 5 + kept + len(embed) + len(head) + 1, [c.shader for c in calls]
    assert len(head) == -(-s.vocab * s.hidden * 2 // caps.max_storage_range)


def test_fused_smollm2_greedy(device):
    """The real SmolLM2-135M-Instruct (Q4_1, q8_0 tied head): a chat prompt then generation, 64+
    tokens, fused greedy tokens equal to unfused at every step. 16 rows per matvec workgroup in
    both modes: lavapipe pays per workgroup, and this keeps the test near a minute (the default
    shapes run in every tiny-model case above)."""
    from tests.helpers.make_models import load_smollm2
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.executors.unfused import UnfusedExecutor

    m = load_smollm2(128)
    caps = replace(
        _caps(device, "sg" if device.info.features.get("subgroup_arithmetic") else "smem"), matvec_rows=16
    )
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = m.tokenizer.encode(m.tokenizer.apply_chat_template(chat), add_special=True)
    fused = ReplayExecutor(device, m.program, m.weights, caps=caps, fuse=True)
    unfused = UnfusedExecutor(device, m.program, m.weights, caps=caps)
    try:
        lowered = [it for it in fused.items if it.call.shader != "advance_step"]
        assert len(lowered) == 5 * m.args.n_layers + 3
        tok, out = prompt[0], []
        for pos in range(max(64, len(prompt) + 16)):
            a, b = fused.step(tok, pos), unfused.step(tok, pos)
            assert a == b, f"pos {pos}: fused {a} != unfused {b}"
            if pos + 1 >= len(prompt):
                out.append(a)
            tok = prompt[pos + 1] if pos + 1 < len(prompt) else a
        assert pos + 1 >= 64
        assert "Paris" in m.tokenizer.decode(out)
    finally:
        fused.close()
        unfused.close()


# (arch, dtype, shape, path, ctx, attn_max_chunk, biases): o-projection bias with split-K partials
# combined by the o-projection (llama sg, 4 splits), quantized (qwen3 q8_0), MLP biases too (smem,
# and a quantized sg case)
BIAS_CASES = [
    ("llama", "f32", "h96d32", "sg", 32, 8, {"attention_bias": True}),
    ("qwen3", "q8_0", "h96d32", "smem", 24, 256, {"attention_bias": True}),
    ("llama", "f16", "h64d16", "smem", 24, 8, {"attention_bias": True, "mlp_bias": True}),
    ("llama", "q4_1", "h96d32", "sg", 20, 256, {"mlp_bias": True}),
]


@pytest.mark.parametrize(
    "arch,dtype,shape,path,ctx,chunk,bias",
    [pytest.param(*c, id=f"bias-{c[0]}-{c[1]}-{'-'.join(c[6])}") for c in BIAS_CASES],
)
def test_fused_biases(device, models, arch, dtype, shape, path, ctx, chunk, bias):
    """attention_bias (q/k/v/o) and mlp_bias: the o- and down-projection biases are added in the
    matmul_add epilogue with the residual (MATMUL_BIAS_ADD), the gate/up biases in the SwiGLU
    epilogue (RMS_NORM_MATMUL_BIAS_SILU_MUL): still 5 dispatches per layer."""
    m = _model(models, arch, dtype, ctx, **SHAPES[shape], **bias)
    items, regions = decode_and_compare(device, m, _caps(device, path, attn_max_chunk=chunk))
    rules = [r.rule for r in regions]
    mlp, o = bias.get("mlp_bias", False), bias.get("attention_bias", False)
    assert rules.count("MATMUL_BIAS_ADD") == (o + mlp) * m.args.n_layers
    assert rules.count("RMS_NORM_MATMUL_BIAS_SILU_MUL") == mlp * m.args.n_layers
    assert len(items) == m.args.n_layers * 5 + 3, [it.call.shader for it in items]
    biased = [it.call.shader for it in items if ("BIAS", "1") in it.call.defines]
    assert sorted(biased) == sorted(
        ["matmul_add"] * (o + mlp) * m.args.n_layers + ["rms_norm_matmul_silu_mul"] * mlp * m.args.n_layers
    )


@pytest.mark.parametrize(
    "shape,quant", [("llama3.1-8b", "q4_k_m"), ("llama3.2-1b", "f16"), ("qwen3-0.6b", "q8_0")]
)
def test_swiglu_reduction_fits_shared_memory(shape, quant):
    """Under lavapipe's caps (16 rows per workgroup, 32 KB of shared memory) the fused SwiGLU's
    reduction (2 * rows + 1 floats per invocation) must fit: Llama-3.1-8B's 4096-wide gate/up took
    256 invocations x 33 floats = 33 KB, a validation error, before the workgroup shrank."""
    from fusion.partition import partition
    from vkdecode.benchmark.shapes import shape_args, weight_dtypes
    from vkdecode.lowering.calls import KernelCaps
    from vkdecode.lowering.regions import region_calls
    from vkdecode.models import build_program

    caps = KernelCaps(
        subgroup_size=8,
        subgroup_arithmetic=True,
        max_storage_range=128 << 20,
        max_invocations=1024,
        max_shared=32768,
        min_align=16,
        subgroup_fixed=True,
        matvec_rows=16,
    )
    args = shape_args(shape, n_layers=1)
    p = build_program(args, 64, weight_dtypes(args, quant))
    (region,) = [r for r in partition(p) if r.rule == "RMS_NORM_MATMUL_SILU_MUL"]
    (call,) = region_calls(p, region, caps)
    wg, rows = call.spec[0], call.spec[2]
    assert call.shader == "rms_norm_matmul_silu_mul" and 8 <= wg and 1 <= rows <= wg
    assert 4 * (2 * rows + 1) * wg <= caps.max_shared


def test_fused_model_with_a_shrunk_swiglu_workgroup(device, models):
    """The SwiGLU workgroup halved to fit a (here artificially) small shared memory still decodes
    as the reference does."""
    m = _model(models, "llama", "q4_k", 12, **SHAPES["h256d64"])
    caps = replace(_caps(device, "sg"), max_shared=4096)
    items, _ = decode_and_compare(device, m, caps)
    (swiglu,) = {it.call.spec[:3] for it in items if it.call.shader == "rms_norm_matmul_silu_mul"}
    assert 4 * (2 * swiglu[2] + 1) * swiglu[0] <= 4096


@pytest.mark.parametrize("kwide,inplace,split", [(-1, 0, 0), (1, 0, 0), (1, -1, 0), (1, 0, -1)])
@pytest.mark.parametrize("path", ["sg", "smem"])
def test_fused_kquant_unit_widths(device, models, path, kwide, inplace, split):
    """A Q4_K_M mix (q4_k q/k, q6_k v and half the downs: mixed-dtype slots) in 8- and 32-element
    K-quant units (KernelCaps.kwide, dequant.glsl KWIDE), wide ones with both nibble decodes
    (KernelCaps.kq_inplace) and both loop bodies (kwide_rows.glsl's split units, KW_JOINT's whole
    ones: KernelCaps.kw_split): same tokens as the unfused step, and every K-quant matvec call has
    WVEC exactly when wide units are on, NIB_OLD / KW_JOINT exactly when they take the old way."""
    m = _model(models, "qwen3", "q4_k_m", 20, kv="f16", **SHAPES["h256d64"])
    caps = _caps(device, path, kwide=kwide, kq_inplace=inplace, kw_split=split)
    items, _ = decode_and_compare(device, m, caps, limit=LIMIT_F16_KV)
    mv = [
        it.call
        for it in items
        if it.call.shader in ("rms_norm_matmul", "matmul_add", "rms_norm_matmul_silu_mul")
    ]
    assert mv and all((("WVEC", "1") in c.defines) == (kwide > 0) for c in mv)
    assert all((("NIB_OLD", "1") in c.defines) == (kwide > 0 and inplace < 0) for c in mv)
    assert all((("KW_JOINT", "1") in c.defines) == (kwide > 0 and split < 0) for c in mv)


@pytest.mark.parametrize("path", ["sg", "smem"])
def test_fused_kquant_split_gpu_shapes(device, models, path):
    """Wide q4_k / q6_k units split (kwide_rows.glsl) in floats (kq_idot=-1; lavapipe has integer
    dot products: test_fused_kquant_integer_dot) with the GPU launch shapes they take: the gate/up 2
    rows of each weight in one subgroup, the q6_k head 8 rows a workgroup, the q4_k q/k/v 4;
    decodes as the reference and the unfused step."""
    m = _model(models, "llama", "q4_k_m", 16, kv="f16", **SHAPES["h256d64"])
    caps = _caps(
        device, path, kwide=1, kw_split=1, kq_idot=-1, matvec_wg=0, matvec_rows=0, attn_wg=0, attn_splits=0
    )
    items, _ = decode_and_compare(device, m, caps, limit=LIMIT_F16_KV)
    calls = [it.call for it in items]
    assert not any(("KW_JOINT", "1") in c.defines for c in calls)
    (gu,) = {c.spec[:3] for c in calls if c.shader == "rms_norm_matmul_silu_mul"}
    assert gu[0] == caps.subgroup_size and gu[2] == 2
    (head,) = [c for c in calls if c.shader == "rms_norm_matmul_argmax"]
    assert m.program.values[head.bindings[2].value].dtype == "q6_k" and head.spec[2] == 8


def test_fused_kquant_non_power_of_two_workgroups(device, models):
    """Every fused matvec (q/k/v, gate/up, matmul_add with its norm partials, the argmax head) in
    workgroups of 5 subgroups, as kernels.kw_balanced gives the 14336-wide downs: decodes as the
    reference and the unfused step. Subgroup reductions only (kw_balanced's condition)."""
    m = _model(models, "llama", "q4_k_m", 16, kv="f16", **SHAPES["h256d64"])
    caps = _caps(
        device,
        "sg",
        kwide=1,
        kw_split=-1,
        matvec_wg=5 * device.info.features.get("subgroup_size", 1),
        matvec_rows=4,
    )
    items, _ = decode_and_compare(device, m, caps, limit=LIMIT_F16_KV)
    assert {it.call.spec[0] for it in items if it.call.shader == "matmul_add"} == {caps.matvec_wg}


# x as two byte planes (16 bits of each 16-element group's largest |x|, calls.x_planes): each
# matvec within ~5e-5 of float64 (tests/bench/test_kquant_idot.py); through 16 steps of these tiny
# random models (weights std 0.3) the logits moved up to 5.1e-3 (three planes: 7.4e-4)
LIMIT_TWO_PLANES = 1e-2


@pytest.mark.parametrize("kv,shapes,planes", [("f32", "device", 2), ("f16", "gpu", 2), ("f16", "gpu", 3)])
def test_fused_kquant_integer_dot(device, models, kv, shapes, planes):
    """Split wide q4_k and q6_k units on integer dot products (KQ_IDOT, KQ_IDOT_Q6: q/k/v with a
    q6_k v slot, gate/up, o and down projections, the q6_k head) decode as the reference and the
    unfused step, and the kernels carry the defines. "gpu": the launch shapes GPUs take
    (one-subgroup gate/up workgroups of 4 rows a weight, the 256-wide head's 8 rows: 4 on rows
    wider than 2048), not the CPU's. x as
    two byte planes (the default) or three (kq_planes=3, within the f16 cache's bound)."""
    if not device.info.features.get("integer_dot"):
        pytest.skip("no shaderIntegerDotProduct on this device (lavapipe has it)")
    m = _model(models, "llama", "q4_k_m", 16, kv=kv, **SHAPES["h256d64"])
    gpu = {"matvec_wg": 0, "matvec_rows": 0} if shapes == "gpu" else {}
    caps = _caps(device, "sg", kwide=1, kw_split=1, kq_idot=1, kq_planes=planes, **gpu)
    limit = LIMIT_F16_KV if planes == 3 else LIMIT_TWO_PLANES
    items, _ = decode_and_compare(device, m, caps, limit=limit)
    if shapes == "gpu":
        (gu,) = {it.call.spec[2] for it in items if it.call.shader == "rms_norm_matmul_silu_mul"}
        (head,) = [it.call for it in items if it.call.shader == "rms_norm_matmul_argmax"]
        assert gu == 4 and head.spec[:3] == (32, 256, 8)
    idot = {it.call.shader for it in items if ("KQ_IDOT", "1") in it.call.defines}
    assert {"rms_norm_matmul", "rms_norm_matmul_silu_mul", "matmul_add"} <= idot, idot
    q6 = {it.call.shader for it in items if ("KQ_IDOT_Q6", "1") in it.call.defines}
    assert {"rms_norm_matmul", "rms_norm_matmul_argmax"} <= q6, q6  # the q6_k v slot and head
    three = {("KQ_PLANES", "3") in it.call.defines for it in items if ("KQ_IDOT", "1") in it.call.defines}
    assert three == {planes == 3}


def test_kwide_automatic_from_4096_wide_rows():
    """GPUs (kwide 0) take wide K-quant units from 4096-wide rows, gate/up and the head from 2048
    (KWIDE_FFN_MIN_IN); CPUs always."""
    from vkdecode.lowering.calls import KWIDE_FFN_MIN_IN, kwide, matvec_shape
    from vkdecode.lowering.caps import KernelCaps

    gpu = KernelCaps(32, True, 1 << 30, 1024, 49152, 16)
    assert kwide("q4_k", 4096, gpu) and not kwide("q4_k", 2048, gpu) and not kwide("q8_0", 4096, gpu)
    assert kwide("q4_k", 2048, gpu, KWIDE_FFN_MIN_IN) and not kwide("q4_k", 1024, gpu, KWIDE_FFN_MIN_IN)
    assert (
        matvec_shape("q6_k", 2048, 128256, gpu, KWIDE_FFN_MIN_IN)[2]
        and not matvec_shape("q6_k", 2048, 128256, gpu)[2]
    )
    assert kwide("q6_k", 256, replace(gpu, kwide=1)) and not kwide("q6_k", 8192, replace(gpu, kwide=-1))


@pytest.mark.parametrize("kernel", ["sg", "wg"])
def test_f16_cache_current_row_is_the_stored_row(device, models, kernel):
    """At position 0 attention over its one row returns that row's v exactly as the f16 cache stores
    it: the kernel rounds the current k, v it uses from registers (kv_round) as it stores them. An
    H100 driver folded unpackHalf2x16(packHalf2x16(x)) into x, so every element came out off the
    stored v there (by up to 1.9e-3) while the logits stayed within 4e-3 (shaders/kv_cache.glsl)."""
    m = _model(models, "qwen2", "f32", 8, kv="f16", **SHAPES["h96d64"])
    caps = _caps(device, "sg", attn_kernel=kernel, attn_splits=1, attn_max_chunk=8)
    from vkdecode.executors.replay import ReplayExecutor

    with ReplayExecutor(device, m.program, m.weights, caps=caps) as ex:
        att = [it.call for it in ex.items if it.call.shader.startswith("rope_kv")]
        assert att and all(c.groups[0] == 1 for c in att)  # one split: o is written whole
        assert all(c.shader.endswith("_sg") == (kernel == "sg") for c in att) or kernel == "sg"
        ex.step(5, 0)
        a = m.args
        for i in range(a.n_layers):
            o = ex.plan.read(f"layers.{i}.attn_out").reshape(a.n_heads, a.head_dim)
            v = ex.plan.slices[(f"layers.{i}.v_cache", "data")].read_array(
                np.float16, a.n_kv_heads * a.head_dim
            )
            v = v.astype(np.float32).reshape(a.n_kv_heads, a.head_dim)
            np.testing.assert_array_equal(o, v[np.arange(a.n_heads) // (a.n_heads // a.n_kv_heads)])


@pytest.mark.parametrize("norm_pre,late", [(1, -1), (1, 1), (-1, 0)])
@pytest.mark.parametrize("shapes", ["cpu", "gpu"])
@pytest.mark.parametrize("path", ["sg", "smem"])
def test_fused_norm_pre(device, models, path, shapes, norm_pre, late):
    """fused_norm_pre (forced on: this model is narrower than NORM_PRE_MIN): each o- and
    down-projection writes x * norm_w and its workgroups' sums of x^2 for the norm after it (the next
    q/k/v, gate/up, the lm_head), with the CPU launch shapes (16 rows a workgroup, more than
    lavapipe's subgroup: the shared-memory partial) and the GPU ones, the consumers summing the
    partials before or after their weight loop (NORM_PRE_LATE); decodes as the reference and the
    unfused step, and norm_pre=-1 pairs nothing."""
    m = _model(models, "llama", "q4_1", 12, **SHAPES["h96d32"])
    gpu = {"matvec_wg": 0, "matvec_rows": 0, "attn_wg": 0, "attn_splits": 0} if shapes == "gpu" else {}
    caps = _caps(device, path, norm_pre=norm_pre, norm_pre_late=late, **gpu)
    items, _ = decode_and_compare(device, m, caps)
    calls = [it.call for it in items]
    prod = [c for c in calls if ("NORM_OUT", "1") in c.defines]
    cons = [c for c in calls if ("NORM_PRE", "1") in c.defines]
    n = m.args.n_layers
    assert (len(prod), len(cons)) == ((2 * n, 2 * n) if norm_pre > 0 else (0, 0))
    assert all((("NORM_PRE_LATE", "1") in c.defines) == (late > 0) for c in cons)
    assert all(dict(c.defines)["N_PARTS"] == str(p.groups[0]) for p, c in zip(prod, cons))

"""Gemma 3 and Llama 3 rope through the fused kernels: tiny models decoded from position 0 to the
end of the context in fused replay against the float64 reference (test_fused_kernels'
decode_and_compare), with the sliding window (6) shorter than the context, split-K attention over
the window, both attention kernels and both reduction paths, quantised GGUF weights. Gemma's
decode subsequences need rule variants, checked by name: RMS_NORM_MATMUL_GELU_MUL (the SwiGLU
kernel with GELU), RMS_NORM_ADD (post-norm + residual add). Ids: `gemma3-<dtype>-<shape>-<path>-ctx<n>-chunk<c>`.
"""

from __future__ import annotations

import pytest

from tests.helpers.make_models import LLAMA3_ROPE
from tests.lowering.test_regions import SHAPES, _caps, _model, decode_and_compare

# (dtype, shape, path, ctx, attn_max_chunk): chunk 2 splits the 6-row window into 3 and the
# global layer's 40 rows into 20; 256 is one workgroup per head
CASES = [
    ("f32", "h64d16", "sg", 40, 256),
    ("f32", "h64d16", "smem", 40, 2),
    ("f32", "h64d128", "sg", 24, 2),
    ("f32", "h64d128", "smem", 24, 256),
    ("q8_0", "h96d32", "sg", 32, 4),
    ("q4_0", "h64d16", "smem", 24, 256),
]
GEMMA_RULES = {
    "RMS_NORM_MATMUL",
    "QK_NORM_ROPE_KV_WRITE_ATTENTION",
    "RMS_NORM_ADD",
    "RMS_NORM_MATMUL_GELU_MUL",
    "RMS_NORM_MATMUL_ARGMAX",
}


@pytest.mark.parametrize(
    "dtype,shape,path,ctx,chunk",
    [pytest.param(*c, id=f"gemma3-{c[0]}-{c[1]}-{c[2]}-ctx{c[3]}-chunk{c[4]}") for c in CASES],
)
def test_fused_gemma3(device, models_dir, dtype, shape, path, ctx, chunk):
    m = _model(models_dir, "gemma3", dtype, ctx, query_pre_attn_scalar=16, **SHAPES[shape])
    assert m.args.sliding_window < ctx and "full_attention" in m.args.layer_types
    caps = _caps(device, path, attn_max_chunk=chunk)
    items, regions = decode_and_compare(device, m, caps)
    assert GEMMA_RULES <= {r.rule for r in regions if r.rule}
    shaders = [it.call.shader for it in items]
    assert shaders.count("rms_norm_add") == 2 * m.args.n_layers
    assert ("GELU", "1") in next(
        it.call.defines for it in items if it.call.shader == "rms_norm_matmul_silu_mul"
    )
    # per layer: q/k/v, attention, o-projection, post-norm + add, norm + gate/up + GeGLU, down,
    # post-norm + add; a split attention keeps its combine (the o-projection is no MATMUL_ADD here)
    combines = shaders.count("attention_combine")
    assert len(items) == 7 * m.args.n_layers + combines + 3, shaders
    windows = {it.call.spec[9] for it in items if it.call.shader.startswith("rope_kv_write_attention")}
    assert windows == {0, m.args.sliding_window}


@pytest.mark.parametrize("dtype,path", [("f32", "sg"), ("q8_0", "smem")])
def test_fused_llama3_rope(device, models_dir, dtype, path):
    """The rope table through the fused attention (GGUF: the rope_freqs tensor, pairs layout)."""
    m = _model(models_dir, "llama", dtype, 40, rope_scaling=LLAMA3_ROPE)
    assert m.args.rope_scaling or m.args.rope_freq_factors
    decode_and_compare(device, m, _caps(device, path, attn_max_chunk=16))

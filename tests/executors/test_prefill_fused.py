"""Fused narrow prompt chunks and verify steps (fusion/chunk_rules.py, vkdecode/kernels_rows_fused.py)
with GPU caps forced on lavapipe (its own caps keep the per-op kernels): the KV cache and logits
equal the token-by-token path (tests/executors/test_prefill.py's tolerances) for every architecture,
the bias variants and the weight dtype families the narrow kernel decodes; speculative decode
equals plain decode; 8 dispatches a layer instead of 16, recorded once (0 descriptor writes, 0
recordings, 1 submit per chunk)."""

from __future__ import annotations

import pytest

from tests.executors.test_prefill import CTX, check_against, prompt, reference_path
from tests.helpers.make_models import tiny_hf_model, write_gguf
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.rows_fused import SHADER
from vkdecode.models.loader import load_model

# the GPU choice: the narrow matmul up to 16 rows (fused here), the wide one from 17 (per op)
GPU = {
    "matmul_narrow": 16,
    "matmul_wide": 0,
    "chunk_fuse": 1,
}  # chunk_fuse: off by default (slower on the H100)


def gpu_caps(device):
    # chunks cut at exactly the widths a test enables (a GPU's own plan pads and merges them)
    return KernelCaps.from_info(device.info, prefill_chunk_rows=-1, **GPU)


def check_runners(dec, all_fused=True):
    """Narrow widths run fused regions (and, all_fused, no per-op matmul); wider ones stay per op;
    every chunk was a replay of its one recording."""
    for w, runner in dec.prefill.runners.items():
        shaders = [it.call.shader for it in runner.items]
        fused = [r.name for r in runner.regions if r.rule]
        if 2 <= w <= 16:
            assert SHADER in shaders and ("matmul_rows_narrow" not in shaders or not all_fused), (
                w,
                set(shaders),
            )
            assert fused and all(n.endswith("_ROWS") for n in fused)
        else:
            assert SHADER not in shaders and not fused
    for w, _, s in dec.prefill.chunks:
        c = s.counters
        assert (
            c.descriptor_writes,
            c.descriptor_set_allocations,
            c.command_buffer_recordings,
            c.submits,
        ) == (0, 0, 0, 1), f"chunk of {w}: {c.as_dict()}"


def run_prompt(device, m, widths=(16, 9, 3), n=30, seed=11, what="", all_fused=True):
    toks = prompt(n, seed=seed)
    want = reference_path(m, toks)
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=gpu_caps(device))) as dec:
        dec.set_prefill(widths)
        check_against(dec, toks, *want, what=what)
        check_runners(dec, all_fused)
        return [c.width for c in dec.prefill.chunks]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
def test_fused_narrow_chunks_equal_token_path(device, models_dir, arch):
    """Llama, Qwen2 (q/k/v biases), Qwen3 (q/k norms, GQA), Gemma 3 (GeGLU; its sandwich norm
    between the o / down projection and the residual add keeps those two per op)."""
    m = load_model(tiny_hf_model(arch, models_dir), ctx=CTX)
    assert run_prompt(device, m, what=arch, all_fused=arch != "gemma3") == [16, 9, 3]  # then the decode step


def test_fused_narrow_chunks_with_every_bias(device, models_dir):
    """attention_bias (q/k/v/o) and mlp_bias: MATMUL_BIAS_ADD_ROWS, RMS_NORM_MATMUL_BIAS_SILU_MUL_ROWS."""
    m = load_model(tiny_hf_model("llama", models_dir, attention_bias=True, mlp_bias=True), ctx=CTX)
    run_prompt(device, m, widths=(9, 2), n=20, what="biases")


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q4_1", "q4_k_m"])
def test_fused_narrow_chunks_every_dtype_family(device, models_dir, dtype):
    """GGUF weights: f16 and q8_0 / q4_1 (decoded a unit at a time), Q4_K_M (q4_k and q6_k
    element by element, q/k/v of two K-quant dtypes in one dispatch)."""
    hf = tiny_hf_model("qwen3", models_dir, hidden_size=256, intermediate_size=256)
    m = load_model(write_gguf(hf, models_dir / f"prefill-fused-qwen3-h256.{dtype}.gguf", dtype), ctx=CTX)
    run_prompt(device, m, widths=(9, 3), n=26, seed=12, what=dtype)


def test_wider_chunks_and_cpu_caps_stay_per_op(device, models_dir):
    """A 32-row chunk (wide kernel) and lavapipe's own caps: no chunk rule applies."""
    m = load_model(tiny_hf_model("llama", models_dir), ctx=CTX)
    assert run_prompt(device, m, widths=(32, 9), n=43, what="wide") == [32, 9]
    with Decoder(make_executor("fused", device, m.program, m.weights)) as dec:
        dec.set_prefill((9,))
        if getattr(device.info, "device_type", "") == "cpu":
            assert not any(r.rule for r in dec.prefill.runners[9].regions)


def test_verify_step_dispatches(device, models_dir):
    """A 9-row verify step (K = 8): 8 dispatches a layer fused, 16 per op; the embed, the final
    norm + lm_head and the argmax besides. Region stats count the fused kernels as region members."""
    m = load_model(tiny_hf_model("llama", models_dir), ctx=CTX)
    layers = m.args.n_layers
    counts = {}
    for mode in ("fused", "replay-nofuse"):
        with Decoder(make_executor(mode, device, m.program, m.weights, caps=gpu_caps(device))) as dec:
            dec.set_speculative(8)
            v = dec.speculative.verify
            counts[mode] = len(v.items)
            rs = v.region_stats()
            assert sum(r["dispatches"] for r in rs) == len(v.items)
            assert sum(r["ops"] for r in rs) == len(v.program.ops)
    assert counts == {"fused": 8 * layers + 3, "replay-nofuse": 16 * layers + 4}


@pytest.mark.parametrize("k", [8, 2])
def test_fused_verify_equals_plain_decode(device, models_dir, k):
    """Speculative decode through fused verify steps of K + 1 rows: greedy output token for token."""
    from tests.executors.test_speculative import plain_tokens, prompts, spec_tokens

    m = load_model(tiny_hf_model("qwen3", models_dir), ctx=96)
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=gpu_caps(device))) as dec:
        ex = dec.executor
        plain = {name: plain_tokens(dec, p, 40) for name, p in prompts().items()}
        dec.set_speculative(k, always_verify=True)
        assert any(r.rule for r in dec.speculative.verify.regions)
        spec = {name: spec_tokens(dec, p, 40) for name, p in prompts().items()}
        st = dec.speculative.stats
        assert all(s.counters.command_buffer_recordings == 0 for s in ex.token_stats)
    assert spec == plain
    assert st.verify_steps > 0 and st.accepted > 0, st.as_dict()

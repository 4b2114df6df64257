"""Batched prefill (executors/prefill.py) against the token-by-token path: the KV cache and the
first token's logits, every architecture, every weight dtype, odd and width-1 chunks, a prompt
that fills the context; and the per-chunk invariants (replay: 0 descriptor writes, 0 recordings,
1 submit per chunk; unfused: re-recorded per chunk).

Tolerances: the chunk kernels sum in another order than the decode kernels (tiled matmul, one-pass
attention), so values agree to f32 rounding: KV rows within 1e-5 of the largest entry, logits
within 1e-4 relative (as tests/executors/test_executors.py for fused vs reference); with f16 KV
caches (the default) both within 2e-3, as there.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.make_models import tiny_hf_model, write_gguf
from vkdecode.errors import ContextError
from vkdecode.executors import make_executor
from vkdecode.executors.decoder import Decoder
from vkdecode.lowering.calls import KernelCaps
from vkdecode.models.loader import load_model
from vkdecode.quant import quantize
from vkdecode.reference import Reference

ARCHS = ("llama", "qwen2", "qwen3")
CTX = 48
KV_TOL, LOGIT_TOL = 1e-5, 1e-4
F16_TOL = 2e-3  # f16 caches (the default): a value rounded from two close f32s may differ by an ulp
# K-quant weights, f16 caches: the chunk matmul decodes element by element and the decode matvec in
# 32-element units, so sums differ a little more (H100: a v-cache row of the Q4_K_M model 2.16e-3)
KQUANT_TOL = 3e-3
# matmul_rows_coop rounds each matmul input to f16 (sums in f32): KV rows and logits within 5e-3
COOP_TOL = 5e-3


@pytest.fixture(scope="module")
def tiny(models_dir):
    return {a: load_model(tiny_hf_model(a, models_dir), ctx=CTX) for a in ARCHS}


def exact(device, **over) -> KernelCaps:
    """The device's caps with prompt chunks cut at exactly the widths a test enables (a GPU's
    default plan pads and merges chunks by cost, kernels_rows.plan_chunks; lavapipe's is exact)."""
    return KernelCaps.from_info(device.info, prefill_chunk_rows=-1, **over)


def prompt(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 290, n)]


def reference_path(m, toks):
    ref = Reference(m.program, m.weights)
    for p, t in enumerate(toks):
        r = ref.step(t, p)
    return ref.state, r["logits"], int(r["next_token"][0])


def check_against(dec, toks, state, logits, nxt, what="", tol=None):
    ex = dec.executor
    got = dec.run_prompt(toks, 0)
    if tol is None and any(
        it.call.shader == "matmul_rows_coop" for r in dec.prefill.runners.values() for it in r.items
    ):
        tol = COOP_TOL  # a chunk of 16+ rows took the tensor cores (f16 inputs) on this device
    n = len(toks)
    f16 = False
    for name, want in state.items():
        v = ex.program.values[name]
        f16 = v.dtype == "f16"
        cache = ex.plan.slices[(name, "data")].read_array("float16" if f16 else "float32", v.numel)
        cache = cache.astype(np.float32).reshape(want.shape)
        err = np.abs(cache[:n] - want[:n]).max() / np.abs(want[:n]).max()
        assert err <= (tol or (F16_TOL if f16 else KV_TOL)), f"{what} {name}: KV rel err {err:.2e}"
    lg = ex.read_logits()
    rel = np.abs(lg - logits).max() / np.abs(logits).max()
    assert rel <= (tol or (F16_TOL if f16 else LOGIT_TOL)), f"{what}: logits rel err {rel:.2e}"
    assert got == nxt, f"{what}: first token {got} != {nxt}"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("mode", ["unfused", "replay-nofuse", "fused"])
def test_prefill_equals_token_path(device, tiny, arch, mode):
    m = tiny[arch]
    toks = prompt(37)
    want = reference_path(m, toks)
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((16, 8, 3))  # 36 = 16 + 16 + 3 + one decode step, then the last
        check_against(dec, toks, *want, what=f"{arch} {mode}")
        assert [c.width for c in dec.prefill.chunks] == [16, 16, 3]
        for w, _, s in dec.prefill.chunks:
            c = s.counters
            if mode == "unfused":  # re-recorded and re-written per chunk, as per token
                assert c.command_buffer_recordings == 1 and c.descriptor_writes > 0
            else:  # recorded once at enable_prefill
                assert (
                    c.descriptor_writes,
                    c.descriptor_set_allocations,
                    c.command_buffer_recordings,
                    c.submits,
                ) == (0, 0, 0, 1), f"chunk of {w}: {c.as_dict()}"


@pytest.mark.parametrize("mode", ["replay-nofuse", "fused"])
def test_prefill_with_the_gpu_narrow_matmul(device, tiny, mode):
    """Chunks of <= 16 rows through matmul_rows_narrow (the GPU choice, forced on lavapipe)."""
    m = tiny["qwen3"]
    toks = prompt(30, seed=3)
    want = reference_path(m, toks)
    caps = exact(device, matmul_narrow=16, matmul_coop=-1)
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=caps)) as dec:
        dec.set_prefill((16, 8, 3))
        check_against(dec, toks, *want, what=f"narrow {mode}")


# the GPU choice (forced on lavapipe): narrow kernel up to 16 rows, wide one from 17, auto tile and
# split over k (the tiny model's grids are small, so the 32-row chunk splits); wide for every row
# count with one tile; and element-path K-quants
WIDE_CAPS = {
    "gpu": {"matmul_narrow": 16, "matmul_wide": 0},
    "all-8x4": {"matmul_narrow": -1, "matmul_wide": 1, "matmul_tile": "8x4", "matmul_splitk": 1},
}


@pytest.mark.parametrize(
    "src,mode,setting",
    [
        ("hf", "fused", "gpu"),
        ("hf", "replay-nofuse", "all-8x4"),
        ("q4_1", "fused", "gpu"),
        ("q4_k", "unfused", "all-8x4"),
    ],
)
def test_prefill_with_the_gpu_wide_matmul(device, tiny, models_dir, src, mode, setting):
    """Chunks through matmul_rows_wide (+ matmul_rows_splitk) equal the token path."""
    m = (
        tiny["qwen3"]
        if src == "hf"
        else load_model(
            write_gguf(
                tiny_hf_model("qwen3", models_dir, hidden_size=256, intermediate_size=256),
                models_dir / f"prefill-qwen3-h256.{src}.gguf",
                src,
            ),
            ctx=CTX,
        )
    )
    toks = prompt(45, seed=4)
    want = reference_path(m, toks)
    caps = exact(device, **WIDE_CAPS[setting])
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=caps)) as dec:
        dec.set_prefill((32, 8, 3))  # 44 = 32 + 8 + 3 + one decode step, then the last
        check_against(dec, toks, *want, what=f"wide {src} {mode} {setting}")
        assert [c.width for c in dec.prefill.chunks] == [32, 8, 3]
        for w, runner in dec.prefill.runners.items():
            shaders = {it.call.shader for it in runner.items}
            assert ("matmul_rows_wide" in shaders) == (w == 32 or setting != "gpu"), (w, shaders)


@pytest.mark.parametrize("src", ["hf", "q4_1", "q4_k"])
def test_prefill_with_the_tensor_core_matmul(device, models_dir, src):
    """Chunks of 64 rows through matmul_rows_coop and attention_rows_coop (where the device has the
    coop path, vk/coopmat.py: the H100, not lavapipe) equal the token path; narrower chunks keep
    the f32 kernels."""
    caps = KernelCaps.from_info(device.info, prefill_chunk_rows=-1, attn_coop=1)  # exact widths
    if not caps.coop_matrix:
        pytest.skip(f"no coop path: {device.info.features.get('coop_reason')} (runs on the H100)")
    hf = tiny_hf_model("qwen3", models_dir, hidden_size=256, intermediate_size=512)
    path = hf if src == "hf" else write_gguf(hf, models_dir / f"prefill-coop-qwen3.{src}.gguf", src)
    m = load_model(path, ctx=160)
    toks = prompt(140, seed=9)
    want = reference_path(m, toks)
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=caps)) as dec:
        dec.set_prefill((64, 8, 3))  # 139 = 64 + 64 + 8 + 3, then the last token
        check_against(dec, toks, *want, what=f"coop {src}", tol=COOP_TOL)
        assert [c.width for c in dec.prefill.chunks] == [64, 64, 8, 3]
        for w, runner in dec.prefill.runners.items():
            shaders = {it.call.shader for it in runner.items}
            assert ("matmul_rows_coop" in shaders) == ("attention_rows_coop" in shaders) == (w == 64), (
                w,
                shaders,
            )


@pytest.mark.parametrize("loud", [1.0, 3e4])
def test_prefill_gemma3_on_the_tensor_cores(device, models_dir, loud):
    """Gemma 3's chunks of 64 rows on matmul_rows_coop, x rows scaled into f16's range
    (Architecture.coop_row_scale), a sliding window shorter than the prompt. loud: the FFN norms'
    weights multiplied so that every gate/up input row passes f16's 65504 (inf without the scaling)."""
    caps = KernelCaps.from_info(device.info, prefill_chunk_rows=-1, attn_coop=1)  # exact widths
    if not caps.coop_matrix:
        pytest.skip(f"no coop path: {device.info.features.get('coop_reason')} (runs on the H100)")
    m = load_model(tiny_hf_model("gemma3", models_dir, hidden_size=256, intermediate_size=512), ctx=160)
    for name in [k for k in m.weights if k.endswith(".ffn_norm")]:
        m.weights[name] = quantize(m.weights[name].dequantize() * np.float32(loud), "f32")
    toks = prompt(140, seed=10)
    want = reference_path(m, toks)
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=caps)) as dec:
        dec.set_prefill((64, 8, 3))
        check_against(dec, toks, *want, what=f"coop gemma3 x{loud}", tol=COOP_TOL)
        for w, runner in dec.prefill.runners.items():
            calls = [it.call for it in runner.items]
            scaled = [c for c in calls if c.shader == "matmul_rows_coop" and ("X_ROWSCALE", "1") in c.defines]
            assert bool(scaled) == (w == 64), (w, [c.shader for c in calls])


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q4_0", "q4_1", "q5_0"])
def test_prefill_every_weight_dtype(device, models_dir, dtype):
    path = write_gguf(tiny_hf_model("qwen2", models_dir), models_dir / f"prefill-qwen2.{dtype}.gguf", dtype)
    m = load_model(path, ctx=CTX)
    toks = prompt(21, seed=1)
    want = reference_path(m, toks)
    with Decoder(make_executor("replay-nofuse", device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((8, 5))
        check_against(dec, toks, *want, what=dtype)


def test_width_one_chunks_and_a_prompt_filling_the_context(device, tiny):
    m = tiny["llama"]
    toks = prompt(CTX, seed=2)  # positions 0 .. ctx-1: the cache is full
    want = reference_path(m, toks)
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((32, 7, 1))  # 47 = 32 + 7 + 7 + 1: width-1 chunks run too
        check_against(dec, toks, *want, what="full context")
        assert [c.width for c in dec.prefill.chunks] == [32, 7, 7, 1]
        with pytest.raises(ContextError):
            dec.run_prompt(toks + [5], 0)


def test_prefill_then_decode_equals_plain_decode(device, tiny):
    """Greedy output after a batched prompt is token for token the token-by-token one; a second
    prompt after the first (positions from 0 again) overwrites the cache as the token path does."""
    m = tiny["qwen3"]
    out = {}
    for name, widths in (("plain", None), ("chunks", (16, 4))):
        with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
            ex = dec.executor
            if widths:
                dec.set_prefill(widths)
            runs = []
            for seed in (3, 4):
                toks = prompt(29, seed)
                nxt = dec.run_prompt(toks, 0)
                runs.append([nxt] + list(ex.decode(nxt, len(toks), 12)))
            out[name] = runs
    assert out["plain"] == out["chunks"]


@pytest.mark.parametrize("mode", ["unfused", "fused"])
def test_padded_last_chunk_then_decode(device, tiny, mode):
    """The GPU chunk plan (forced here): a last chunk wider than the prompt's rest writes KV rows
    past the prompt; the KV rows of the prompt and the first token equal the token path, and the
    greedy tokens after it equal plain decode (each later step overwrites its row before reading)."""
    m = tiny["llama"]
    caps = KernelCaps.from_info(device.info, prefill_chunk_rows=64)
    toks = prompt(30, seed=8)
    want = reference_path(m, toks)
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=exact(device))) as dec:
        ex = dec.executor
        nxt = dec.run_prompt(toks, 0)
        plain = [nxt] + list(ex.decode(nxt, len(toks), 10))
    with Decoder(make_executor(mode, device, m.program, m.weights, caps=caps)) as dec:
        ex = dec.executor
        dec.set_prefill((16, 8))
        check_against(dec, toks, *want, what=f"padded {mode}")
        assert [c.width for c in dec.prefill.chunks] == [16, 16]  # 29 tokens: 16 + 13 in 16 rows
        nxt = dec.run_prompt(toks, 0)
        assert [nxt] + list(ex.decode(nxt, len(toks), 10)) == plain


def test_chunk_plan():
    """plan_chunks: the cheapest cover (chunk = fixed + width rows, decode token = step), padding
    only the last chunk and only within the context."""
    from vkdecode.executors.prefill import WIDTHS_GPU, plan_chunks

    gpu = (512, 256, 128, 64, 16, 4)
    assert plan_chunks(511, gpu, 10**6, 64, 21) == ((512, 511),)
    assert plan_chunks(511, gpu, 511, 64, 21) == (
        (256, 256),
        (128, 128),
        (64, 64),
        (16, 16),
        (16, 16),
        (16, 16),
        (4, 4),
        (4, 4),
        (4, 4),
    )  # 512 rows do not fit
    assert plan_chunks(1999, gpu, 10**6, 64, 21) == ((512, 512),) * 3 + ((512, 463),)
    # the GPU's default widths take a 2,000-token prompt as one padded 2048-row chunk, and 8,000
    # tokens as a whole 4096-row chunk and a padded one
    assert plan_chunks(1999, WIDTHS_GPU, 10**6, 64, 21) == ((2048, 1999),)
    assert plan_chunks(7999, WIDTHS_GPU, 10**6, 64, 21) == ((4096, 4096), (4096, 3903))
    assert plan_chunks(3, gpu, 10**6, 64, 21) == ()  # three decode steps
    assert plan_chunks(19, gpu, 10**6, 64, 21) == ((64, 19),)
    for n in range(0, 700, 7):
        for room in (n, n + 3, n + 600):
            plan = plan_chunks(n, gpu, room, 64, 21)
            assert sum(k for _, k in plan) <= n and all(k == w for w, k in plan[:-1])
            assert sum(w for w, _ in plan) <= max(room, sum(k for _, k in plan))


def test_prefill_regions_reported(device, tiny):
    m = tiny["llama"]
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((8,))
        rs = dec.prefill.region_stats()[8]
        assert rs and sum(r["ops"] for r in rs) == len(dec.prefill.runners[8].program.ops)
        assert any(r["weight_bytes"] > 0 for r in rs)


def test_prefill_with_every_bias(device, models_dir):
    """attention_bias (q/k/v/o) and mlp_bias: a bias weight is added to every row of a chunk."""
    m = load_model(tiny_hf_model("llama", models_dir, attention_bias=True, mlp_bias=True), ctx=CTX)
    toks = prompt(19, seed=5)
    want = reference_path(m, toks)
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
        dec.set_prefill((8, 3))
        check_against(dec, toks, *want, what="biases")


def test_prefill_gemma3_window_and_k_quants(device, models_dir):
    """Gemma 3 (embed scale, gelu_mul, extra norms, sliding-window layers) and a Q4_K_M GGUF
    (K-quant weights decoded element by element in the chunk matmul)."""
    hf = tiny_hf_model("gemma3", models_dir)
    for src in (
        hf,
        write_gguf(
            tiny_hf_model("llama", models_dir, hidden_size=256, intermediate_size=256),
            models_dir / "prefill-llama-h256.q4_k_m.gguf",
            "q4_k_m",
        ),
    ):
        m = load_model(src, ctx=CTX)
        toks = prompt(30, seed=6)
        want = reference_path(m, toks)
        with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
            dec.set_prefill((16, 5))
            check_against(dec, toks, *want, what=str(src), tol=KQUANT_TOL if src != hf else None)


def test_widest_chunk_dropped_when_out_of_memory(device, tiny, monkeypatch):
    """The device's default widths: a widest chunk whose buffers fail to allocate is left out with
    a warning, and the prompt runs on the narrower ones as exactly; widths named by the caller
    are refused instead (the allocation error, with its sizes)."""
    from vkdecode.errors import DeviceMemoryError
    from vkdecode.executors import prefill as prefill_mod

    real = prefill_mod.chunk_executor

    def tight(mode, dev, prog, caps, share):  # a device whose memory holds 16-row chunks at most
        if prog.meta["chunk_rows"] > 16:
            raise DeviceMemoryError(f"out of device memory: {prog.meta['chunk_rows']}-row chunk (test)")
        return real(mode, dev, prog, caps, share)

    monkeypatch.setattr(prefill_mod, "chunk_executor", tight)
    monkeypatch.setattr(prefill_mod, "default_widths", lambda device: (32, 16, 8))  # ctx 48
    m = tiny["qwen3"]
    toks = prompt(40, seed=5)
    want = reference_path(m, toks)
    with Decoder(make_executor("fused", device, m.program, m.weights, caps=exact(device))) as dec:
        with pytest.warns(UserWarning, match="prompt chunks of 32 rows left out: out of device memory"):
            dec.set_prefill()
        assert dec.prefill.widths == (16, 8) and dec.prefill.dropped == (32,)
        check_against(dec, toks, *want, what="32 rows dropped")
        assert [c.width for c in dec.prefill.chunks] == [16, 16]  # 39 tokens: the last 7 as steps
        with pytest.raises(DeviceMemoryError, match="32-row chunk"):
            dec.set_prefill((32, 16))

"""Prompt-chunk kernels besides the matmul (vkdecode/lowering/rows.py, attr rows=T; the matmuls:
test_matmul_rows.py) against the float64 reference: the block causal attention at several chunk
positions, rope / kv_write / embed / bias add / argmax over rows.
"""

from dataclasses import replace

import numpy as np
import pytest

from tests.lowering.kernel_harness import (
    PackedWeight,
    caps_of,
    draw_sinks,
    head_nmse,
    nmse,
    one_op,
    run_and_reference,
    step,
)
from tests.lowering.test_matmul_rows import DTYPES
from vkdecode.lowering.calls import KernelCaps
from vkdecode.lowering.ops import op_calls
from vkdecode.quant import quantize
from vkdecode.reference import run_op

HEADS = [(4, 2, 16), (3, 1, 6), (2, 2, 128), (9, 3, 64)]


def _attention_case(device, h, kvh, d, rows, pos0, caps, window=0, kv="f32", sinks=False):
    """(shader, nmse) of a chunk attention; with sinks (gpt-oss, the op's 5th input) the worst
    head's nmse, after checking the op without them would be far off (the test can fail)."""
    ctx = 128
    rng = np.random.default_rng(h * 100 + rows + pos0)
    kc = rng.standard_normal((ctx, kvh * d)).astype(np.float32)
    vc = rng.standard_normal((ctx, kvh * d)).astype(np.float32)
    kc[pos0 + rows :] = vc[pos0 + rows :] = 1e4  # past the last row's position: must not be read
    if window:  # before the first row's window: neither
        kc[: max(0, pos0 + 1 - window)] = vc[: max(0, pos0 + 1 - window)] = 1e4
    if kv == "f16":  # the reference reads the very halves the GPU holds
        kc, vc = (c.astype(np.float16).astype(np.float32) for c in (kc, vc))
    q = rng.standard_normal(rows * h * d).astype(np.float32)
    env = {"q": q, "kc": kc, "vc": vc, "step": step(0, pos0)}
    ins = {
        "q": ((rows * h * d,), "f32", "activation"),
        "kc": ((ctx, kvh * d), kv, "state"),
        "vc": ((ctx, kvh * d), kv, "state"),
        "step": ((8,), "u32", "step"),
    }
    if sinks:
        ins["sinks"] = ((h,), "f32", "weight")
        env["sinks"] = PackedWeight("f32", (h,), {"data": draw_sinks(rng, h)})
    p = one_op(
        "attention",
        ins,
        {"o": ((rows * h * d,), "f32", "output")},
        n_heads=h,
        n_kv_heads=kvh,
        head_dim=d,
        scale=d**-0.5,
        rows=rows,
        **({"window": window} if window else {}),
    )
    got, want = run_and_reference(device, p, env, caps)
    shader = op_calls(p, 0, caps)[0].shader
    if not sinks:
        return shader, nmse(got["o"], want["o"])
    off = {**env, "sinks": PackedWeight("f32", (h,), {"data": np.full(h, -np.inf, np.float32)})}
    assert head_nmse(run_op(p.ops[0], p, off, dtype=np.float64)["o"], want["o"], h, d) > 1e-6
    return shader, head_nmse(got["o"], want["o"], h, d)


@pytest.mark.parametrize("h,kvh,d", HEADS, ids=[f"h{h}kv{k}d{d}" for h, k, d in HEADS])
@pytest.mark.parametrize("rows,pos0", [(1, 0), (3, 0), (8, 5), (16, 100), (5, 123), (17, 40), (65, 0)])
@pytest.mark.parametrize("path", ["sg", "sg512", "smem", "gqa"])
def test_attention_rows(device, h, kvh, d, rows, pos0, path):
    """The per-row kernel (subgroup or shared-memory reductions; sg512: at a GPU's 512 invocations,
    more key groups than head_dim's power of two) and the kv-head one (auto rows)."""
    # gqa from 2 rows (a GPU's own choice is the per-row kernel under 17), never the tensor cores
    caps = caps_of(device, attn_rows_q=0 if path == "gqa" else -1, attn_gqa_rows=2, attn_coop=-1)
    if path.startswith("sg") and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    caps = replace(
        caps, subgroup_arithmetic=path.startswith("sg"), attn_rows_wg=512 if path == "sg512" else 0
    )
    shader, err = _attention_case(device, h, kvh, d, rows, pos0, caps)
    assert shader == (
        "attention" if rows == 1 else "attention_rows_gqa" if path == "gqa" else "attention_rows"
    )
    assert err <= 1e-9


SINK_CASES = [(3, 0, 0), (8, 60, 0), (17, 28, 0), (8, 60, 13)]  # rows, pos0, window
SINK_HEADS = [(4, 2, 16), (3, 1, 6), (9, 3, 64)]


@pytest.mark.parametrize("h,kvh,d", SINK_HEADS, ids=[f"h{h}kv{k}d{d}" for h, k, d in SINK_HEADS])
@pytest.mark.parametrize("rows,pos0,window", SINK_CASES, ids=[f"T{t}-pos{p}-w{w}" for t, p, w in SINK_CASES])
@pytest.mark.parametrize("path", ["sg", "smem", "gqa"])
def test_attention_rows_sinks(device, h, kvh, d, rows, pos0, window, path):
    """gpt-oss's sinks in the chunk attention (the per-row kernel, both reductions, and the kv-head
    one): rows whose keys cross a key tile (attention_rows: 64 keys on a CPU, the kv-head kernel 32),
    a sliding window, sinks N(0, 2) with one head at +30 and one at -30."""
    caps = caps_of(device, attn_rows_q=0 if path == "gqa" else -1, attn_gqa_rows=2, attn_coop=-1)
    if path == "sg" and not caps.subgroup_arithmetic:
        pytest.skip("device has no subgroup arithmetic")
    caps = replace(caps, subgroup_arithmetic=path == "sg")
    shader, err = _attention_case(device, h, kvh, d, rows, pos0, caps, window, sinks=True)
    assert shader == ("attention_rows_gqa" if path == "gqa" else "attention_rows")
    assert err <= 1e-9, f"worst head nmse {err:.3g}"


def test_attention_rows_coop_binds_the_sinks():
    """attention_rows_coop takes gpt-oss's sinks (define SINKS, binding 5, after o): the lowering
    alone, here; the kernel's results are tests/lowering/test_coop.py's (GPU only)."""
    from vkdecode.lowering.coop import coop_attention_shape
    from vkdecode.lowering.rows import row_op_calls

    gpu = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, coop_matrix=True)
    h, kvh, d, rows = 8, 2, 64, 32
    ins = {
        "q": ((rows * h * d,), "f32", "activation"),
        "kc": ((128, kvh * d), "f16", "state"),
        "vc": ((128, kvh * d), "f16", "state"),
        "step": ((8,), "u32", "step"),
    }
    attrs = {"n_heads": h, "n_kv_heads": kvh, "head_dim": d, "scale": 0.125, "rows": rows}
    out = {"o": ((rows * h * d,), "f32", "output")}
    plain = one_op("attention", ins, out, **attrs)
    sinks = one_op("attention", {**ins, "sinks": ((h,), "f32", "weight")}, out, **attrs)
    if coop_attention_shape(gpu, "", plain.ops[0].attrs, True) is None:
        pytest.skip("these caps take no tensor-core attention")
    assert row_op_calls(plain, plain.ops[0], gpu)[0].shader == "attention_rows_coop"
    call = row_op_calls(sinks, sinks.ops[0], gpu)[0]
    assert call.shader == "attention_rows_coop" and ("SINKS", "1") in call.defines
    assert [b.value for b in call.bindings] == ["q", "kc", "vc", "step", "o", "sinks"] and call.writes == (4,)


GQA_CASES = [
    (9, 3, 64, 33, 7, 1, 0, "f32"),
    (9, 3, 64, 33, 7, 4, 0, "f16"),
    (16, 8, 128, 40, 60, 8, 0, "f16"),
    (4, 2, 16, 20, 90, 2, 13, "f32"),
    (4, 1, 32, 17, 3, 16, 5, "f16"),
    (3, 1, 6, 9, 30, 3, 4, "f32"),
]


@pytest.mark.parametrize(
    "h,kvh,d,rows,pos0,bq,window,kv",
    GQA_CASES,
    ids=[f"h{h}kv{k}d{d}-T{t}-pos{p}-bq{b}-w{w}-{kv}" for h, k, d, t, p, b, w, kv in GQA_CASES],
)
def test_attention_rows_gqa(device, h, kvh, d, rows, pos0, bq, window, kv):
    """attention_rows_gqa over row blocks that do not divide the chunk, sliding windows shorter than
    the chunk (rows whose window starts inside the block's first key tile) and f16 caches."""
    shader, err = _attention_case(
        device, h, kvh, d, rows, pos0, caps_of(device, attn_rows_q=bq, attn_coop=-1), window, kv
    )
    assert shader == "attention_rows_gqa"
    assert err <= 1e-9, f"nmse {err:.3g}"


def test_attention_rows_gqa_choice(device):
    """Rows per workgroup: 16 (fewer for narrower chunks), halved until the query vectors fit the
    shared memory and the workgroup; the per-row kernel where even one row does not."""
    from vkdecode.lowering.rows import gqa_rows

    caps = replace(caps_of(device), attn_rows_q=0, attn_gqa_rows=2, max_shared=49152, max_invocations=1024)
    assert gqa_rows(caps, 2, 128, 512) == 16 and gqa_rows(caps, 3, 64, 512) == 16
    assert gqa_rows(caps, 2, 128, 5) == 5  # a narrow chunk: its own rows, no padding vectors
    assert gqa_rows(replace(caps, max_shared=32768), 2, 128, 512) == 8
    assert gqa_rows(caps, 33, 64, 512) == 0  # 33 vectors: a 32-invocation workgroup
    assert gqa_rows(caps, 24, 64, 512) == 4  # 16 rows: 384 vectors > 256; 8: 83 KB of tiles
    assert gqa_rows(replace(caps, attn_rows_q=-1), 2, 128, 512) == 0


@pytest.mark.parametrize("layout", ["neox", "pairs"])
def test_rope_rows(device, layout):
    rows, h, d = 7, 3, 16
    x = np.random.default_rng(2).standard_normal(rows * h * d).astype(np.float32)
    from vkdecode.quant import PackedWeight

    freqs = (10000.0 ** (-np.arange(0, d, 2) / d)).astype(np.float32)
    p = one_op(
        "rope",
        {
            "x": ((rows * h * d,), "f32", "activation"),
            "step": ((8,), "u32", "step"),
            "f": ((d // 2,), "f32", "weight"),
        },
        {"y": ((rows * h * d,), "f32", "output")},
        n_heads=h,
        head_dim=d,
        layout=layout,
        rows=rows,
    )
    env = {"x": x, "step": step(0, 40), "f": PackedWeight("f32", (d // 2,), {"data": freqs})}
    got, want = run_and_reference(device, p, env, caps_of(device))
    assert nmse(got["y"], want["y"]) <= 1e-9


def test_kv_write_rows_touches_only_its_rows(device):
    rows, row, ctx, pos0 = 5, 24, 16, 9
    rng = np.random.default_rng(3)
    k, v = (rng.standard_normal(rows * row).astype(np.float32) for _ in range(2))
    old_k, old_v = (rng.standard_normal((ctx, row)).astype(np.float32) for _ in range(2))
    p = one_op(
        "kv_write",
        {
            "k": ((rows * row,), "f32", "activation"),
            "v": ((rows * row,), "f32", "activation"),
            "step": ((8,), "u32", "step"),
        },
        {"kc": ((ctx, row), "f32", "state"), "vc": ((ctx, row), "f32", "state")},
        rows=rows,
    )
    env = {"k": k, "v": v, "step": step(0, pos0), "kc": old_k.copy(), "vc": old_v.copy()}
    got, want = run_and_reference(device, p, env, caps_of(device))
    np.testing.assert_array_equal(got["kc"], want["kc"])
    np.testing.assert_array_equal(got["vc"][:pos0], old_v[:pos0])  # rows before: kept
    np.testing.assert_array_equal(got["vc"][pos0 + rows :], old_v[pos0 + rows :])  # after: kept


@pytest.mark.parametrize("dtype", DTYPES)
def test_embed_rows(device, dtype):
    rows, vocab, dim = 6, 50, 64
    rng = np.random.default_rng(4)
    t = quantize(rng.standard_normal((vocab, dim)).astype(np.float32), dtype)
    ids = np.array([3, 49, 0, 3, 17, 8], np.uint32)
    p = one_op(
        "embed",
        {"t": ((vocab, dim), dtype, "weight"), "ids": ((rows,), "u32", "step")},
        {"y": ((rows * dim,), "f32", "output")},
        rows=rows,
    )
    got, want = run_and_reference(device, p, {"t": t, "ids": ids}, caps_of(device))
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)


def test_add_bias_rows_and_argmax_rows(device):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(4 * 40).astype(np.float32), rng.standard_normal(40).astype(np.float32)
    p = one_op(
        "add",
        {"a": ((160,), "f32", "activation"), "b": ((1, 40), "f32", "weight")},
        {"c": ((160,), "f32", "output")},
    )
    got, want = run_and_reference(device, p, {"a": a, "b": quantize(b[None, :], "f32")}, caps_of(device))
    np.testing.assert_allclose(got["c"], want["c"], rtol=1e-6)
    logits = rng.standard_normal(3 * 1000).astype(np.float32)
    logits[1000 + 7] = logits[1000 + 900] = 50.0  # a tie: the first index wins
    p = one_op("argmax", {"l": ((3000,), "f32", "activation")}, {"t": ((3,), "u32", "output")}, rows=3)
    got, want = run_and_reference(device, p, {"l": logits}, caps_of(device))
    np.testing.assert_array_equal(got["t"], want["t"])
    assert got["t"][1] == 7


def test_gqa_attention_choice_by_width(device):
    """GPU caps keep chunks under 17 rows on the per-row attention (a verify step's few kv-head
    workgroups starved an H100); CPU caps take the kv-head kernel from 2 rows; attn_rows_q forces."""
    from vkdecode.lowering.rows import gqa_rows

    gpu = replace(caps_of(device), attn_gqa_rows=0, attn_rows_q=0, max_shared=49152, max_invocations=1024)
    assert gqa_rows(gpu, 3, 64, 9) == 0 and gqa_rows(gpu, 3, 64, 16) == 0
    assert gqa_rows(gpu, 3, 64, 17) > 0
    assert gqa_rows(replace(gpu, attn_rows_q=4), 3, 64, 9) == 4
    assert gqa_rows(replace(gpu, attn_gqa_rows=2), 3, 64, 9) > 0
    if getattr(device.info, "device_type", "") == "cpu":
        assert caps_of(device).attn_gqa_rows == 2

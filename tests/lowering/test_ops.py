"""embed, rms_norm, add, silu_mul, gelu_mul, rope, kv_write and argmax kernels against the float64 reference.

Ids read `<op>-<dtype or layout>-<shape>[-<variant>]`, e.g. `-k "rope-neox"`, `-k "embed-q8_0"`.
"""

import zlib
from dataclasses import replace

import numpy as np
import pytest

from fusion.ir import IRError
from tests.lowering.kernel_harness import caps_of, nmse, one_op, run_and_reference, step
from vkdecode.lowering.ops import op_calls
from vkdecode.models.rope import inv_freq
from vkdecode.quant import pack_float, quantize

# Element-wise f32 math against float64: one or two roundings per element (~1e-14); exp in
# silu and inversesqrt in rms_norm are a few ulp on GPUs, still far below 1e-10.
LIMIT_F32 = 1e-10
# rope: the angle f32(pos) * freqs[i] is the same f32 product on both sides, but GPU sin/cos of a
# range-reduced angle are a few ulp of the angle: at p = 5000 the phase error is up to ~3e-4 rad.
LIMIT_ROPE = 3e-7
DTYPES = ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl", "mxfp4"]
K_TYPES = ["q4_k", "q5_k", "q6_k", "q2_k", "q3_k"]  # in-dims of whole 256-superblocks


def _paths(device):
    caps = caps_of(device)
    return {
        "smem": replace(caps, subgroup_arithmetic=False),
        **({"sg": caps} if caps.subgroup_arithmetic else {}),
    }


def _caps(device, path):
    paths = _paths(device)
    if path not in paths:
        pytest.skip("device has no subgroup arithmetic")
    return paths[path]


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))  # stable across runs, unlike hash()


# ---------------------------------------------------------------- embed

EMBED = [(dt, v, d) for dt in DTYPES for v, d in [(50, 32), (7, 64 if dt != "f32" else 33), (40, 576)]]
EMBED += [(dt, v, d) for dt in K_TYPES for v, d in [(33, 256), (7, 768), (40, 1024)]]


@pytest.mark.parametrize(
    "dtype,vocab,dim", [pytest.param(*c, id=f"embed-{c[0]}-{c[1]}x{c[2]}") for c in EMBED]
)
@pytest.mark.parametrize("scale", [1.0, 25.298221])  # Gemma: sqrt(hidden) as f32
def test_embed(device, dtype, vocab, dim, scale):
    rng = _rng("embed", dtype, vocab, dim)
    table = quantize(rng.standard_normal((vocab, dim)).astype(np.float32), dtype)
    p = one_op(
        "embed",
        {"t": ((vocab, dim), dtype, "weight"), "step": ((8,), "u32", "step")},
        {"y": ((dim,), "f32", "output")},
        **({"scale": scale} if scale != 1.0 else {}),
    )
    for tok in (0, vocab // 2, vocab - 1):
        got, want = run_and_reference(device, p, {"t": table, "step": step(tok, 3)}, caps_of(device))
        assert nmse(got["y"], want["y"]) <= 1e-12, f"token {tok}"


@pytest.mark.parametrize("dtype", ["f16", "q8_0", "q6_k"])
def test_embed_row_split(device, dtype):
    """A table beyond maxStorageBufferRange (faked) is bound as row ranges; only the call whose
    range holds the token writes."""
    vocab, dim = 700, 256 if dtype in K_TYPES else 64
    rng = _rng("embed-split", dtype)
    table = quantize(rng.standard_normal((vocab, dim)).astype(np.float32), dtype)
    p = one_op(
        "embed",
        {"t": ((vocab, dim), dtype, "weight"), "step": ((8,), "u32", "step")},
        {"y": ((dim,), "f32", "output")},
    )
    caps = replace(caps_of(device), max_storage_range=max(table.row_bytes(p) for p in table.parts) * 300)
    assert len(op_calls(p, 0, caps)) == 3
    for tok in (0, 255, 256, 511, 699):
        got, want = run_and_reference(device, p, {"t": table, "step": step(tok, 0)}, caps)
        assert nmse(got["y"], want["y"]) <= 1e-12, f"token {tok}"


# ---------------------------------------------------------------- rms_norm

NORM = [
    (31, 31),
    (32, 32),
    (33, 33),
    (65, 65),
    (576, 576),
    (1024, 1024),
    (4864, 4864),
    (16 * 64, 64),
    (8 * 128, 128),
    (3 * 33, 33),
]


@pytest.mark.parametrize("path", ["sg", "smem"])
@pytest.mark.parametrize("n,d", [pytest.param(n, d, id=f"rms_norm-{n}/{d}") for n, d in NORM])
def test_rms_norm(device, n, d, path):
    rng = _rng("norm", n, d)
    p = one_op(
        "rms_norm",
        {"x": ((n,), "f32", "activation"), "w": ((d,), "f32", "weight")},
        {"y": ((n,), "f32", "output")},
        eps=1e-6,
    )
    from vkdecode.quant import pack_float

    env = {
        "x": (rng.standard_normal(n) * 3).astype(np.float32),
        "w": pack_float(rng.standard_normal(d).astype(np.float32), "f32"),
    }
    got, want = run_and_reference(device, p, env, _caps(device, path))
    assert nmse(got["y"], want["y"]) <= LIMIT_F32


# ---------------------------------------------------------------- add, silu_mul


@pytest.mark.parametrize("kind", ["add", "silu_mul", "gelu_mul"])
@pytest.mark.parametrize("n", [1, 31, 33, 65, 1000, 4864])
def test_elementwise(device, kind, n):
    rng = _rng(kind, n)
    p = one_op(
        kind,
        {"a": ((n,), "f32", "activation"), "b": ((n,), "f32", "activation")},
        {"c": ((n,), "f32", "output")},
    )
    env = {
        "a": (rng.standard_normal(n) * 4).astype(np.float32),
        "b": rng.standard_normal(n).astype(np.float32),
    }
    if (
        kind == "gelu_mul" and n > 8
    ):  # gelu's tails: the tanh clamp must give exactly gelu(x) = x / 0 there, not NaN
        env["a"][:4] = [-60.0, 60.0, -1e4, 1e4]
    got, want = run_and_reference(device, p, env, caps_of(device))
    assert nmse(got["c"], want["c"]) <= LIMIT_F32


# ---------------------------------------------------------------- rope

ROPE = [(1, 2, 10000.0), (3, 64, 10000.0), (9, 64, 100000.0), (16, 128, 1000000.0), (5, 6, 500000.0)]


@pytest.mark.parametrize("pos", [0, 1, 7, 100, 5000])
@pytest.mark.parametrize("h,d,theta", [pytest.param(*r, id=f"{r[0]}x{r[1]}-theta{r[2]:g}") for r in ROPE])
@pytest.mark.parametrize("layout", ["neox", "pairs"], ids=["rope-neox", "rope-pairs"])
def test_rope(device, layout, h, d, theta, pos):
    rng = _rng("rope", h, d, pos)
    p = one_op(
        "rope",
        {
            "x": ((h * d,), "f32", "activation"),
            "step": ((8,), "u32", "step"),
            "freqs": ((d // 2,), "f32", "weight"),
        },
        {"y": ((h * d,), "f32", "output")},
        n_heads=h,
        head_dim=d,
        layout=layout,
    )
    env = {
        "x": rng.standard_normal(h * d).astype(np.float32),
        "step": step(5, pos),
        "freqs": pack_float(inv_freq(theta, d), "f32"),
    }
    got, want = run_and_reference(device, p, env, caps_of(device))
    assert nmse(got["y"], want["y"]) <= (LIMIT_F32 if pos <= 1 else LIMIT_ROPE)


# ---------------------------------------------------------------- kv_write


@pytest.mark.parametrize("kv", ["f32", "f16"])
@pytest.mark.parametrize(
    "ctx,kvh,d,pos", [(16, 1, 64, 0), (16, 2, 64, 5), (16, 3, 33, 15), (40, 8, 128, 39), (16, 3, 18, 7)]
)
def test_kv_write(device, ctx, kvh, d, pos, kv):
    row = kvh * d
    ins = {
        "k": ((row,), "f32", "activation"),
        "v": ((row,), "f32", "activation"),
        "step": ((8,), "u32", "step"),
    }
    outs = {"kc": ((ctx, row), kv, "state"), "vc": ((ctx, row), kv, "state")}
    if kv == "f16" and row % 2:  # an f16 row is written as whole words: odd rows are refused
        with pytest.raises(IRError, match="must be even"):
            one_op("kv_write", ins, outs)
        return
    rng = _rng("kv", ctx, kvh, d, pos)
    p = one_op("kv_write", ins, outs)
    env = {
        "k": rng.standard_normal(row).astype(np.float32),
        "v": rng.standard_normal(row).astype(np.float32),
        "step": step(1, pos),
        "kc": rng.standard_normal((ctx, row)).astype(np.float32),
        "vc": rng.standard_normal((ctx, row)).astype(np.float32),
    }
    if kv == "f16":  # the caches hold halves; the reference then rounds the new row like the GPU
        env["kc"], env["vc"] = (env[c].astype(np.float16).astype(np.float32) for c in ("kc", "vc"))
    got, want = run_and_reference(device, p, env, caps_of(device))
    for name in ("kc", "vc"):  # the other rows must be kept bit for bit, the new one rounded alike
        np.testing.assert_array_equal(got[name].astype(np.float32), want[name].astype(np.float32))


# ---------------------------------------------------------------- argmax


def _logits(n, case, rng):
    x = rng.standard_normal(n).astype(np.float32)
    if case == "ties":  # the max appears several times: the first index wins
        for i in sorted(rng.choice(n, size=min(n, 5), replace=False)):
            x[i] = 7.5
    elif case == "flat":  # every element equal: index 0
        x[:] = -1.25
    elif case == "last":
        x[-1] = 9.0
    return x


@pytest.mark.parametrize("path", ["sg", "smem"])
@pytest.mark.parametrize("case", ["random", "ties", "flat", "last"])
@pytest.mark.parametrize("n", [1, 31, 33, 1000, 49152, 151936])
def test_argmax(device, n, case, path):
    rng = _rng("argmax", n, case)
    p = one_op("argmax", {"x": ((n,), "f32", "activation")}, {"tok": ((1,), "u32", "output")})
    x = _logits(n, case, rng)
    got, _ = run_and_reference(device, p, {"x": x}, _caps(device, path))
    assert int(got["tok"][0]) == int(np.argmax(x))

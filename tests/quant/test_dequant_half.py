"""dequant_half.glsl (the tensor-core tile loaders' f16 decode) against the packed weight's exact
dequantization, run through tests/shaders/dequant_half_probe.comp on any device with f16 math."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.shaders import DEQUANT_HALF_PROBE
from vkdecode.quant.blocks import dequantize, pack_gguf_blocks, quantize
from vkdecode.vk import write_descriptor_set

WG = 64
ROWS, K = 6, 512
DTYPES = ["f16", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k", "q6_k", "mxfp4"]


def run_probe(device, w) -> np.ndarray:
    """Every element of w as dequant_half decodes it, f16 [ROWS, K]."""
    parts = [w.parts["data"]] if w.dtype == "f16" else [w.parts["q"], w.parts["s"]]
    parts = [np.ascontiguousarray(p).view(np.uint32).ravel() for p in parts]
    parts += [np.zeros(1, np.uint32)] * (2 - len(parts))  # f16: binding 1 is unused
    bufs = [device.buffer(p.nbytes, name=f"b{i}") for i, p in enumerate(parts)]
    out = device.buffer(ROWS * K * 2, name="y")
    pool = device.descriptor_pool(1, 3)
    cmd = device.command_buffer()
    try:
        for b, p in zip(bufs, parts):
            b.write(p)
        pipe = device.pipeline(
            DEQUANT_HALF_PROBE, spec=(WG, K, ROWS), defines={f"DT_{w.dtype.upper()}": 1}, n_bindings=3
        )
        dset = pool.allocate(pipe)
        write_descriptor_set(
            device, dset, [(b, 0, p.nbytes) for b, p in zip(bufs, parts)] + [(out, 0, ROWS * K * 2)]
        )
        cmd.begin()
        cmd.bind(pipe, dset)
        cmd.dispatch(-(-ROWS * K // 4 // WG))
        cmd.host_barrier()
        cmd.end()
        device.submit([cmd])
        return out.read_array(np.uint16, ROWS * K).view(np.float16).reshape(ROWS, K)
    finally:
        for obj in [cmd, pool, out] + bufs:
            obj.close()


@pytest.mark.parametrize("dtype", DTYPES)
def test_dequant_half_matches_exact_decode(device, dtype):
    if not device.info.features.get("float16"):
        pytest.skip("no shaderFloat16 (dequant_half runs only in the tensor-core kernels, which need it)")
    rng = np.random.default_rng(len(dtype))
    a = rng.standard_normal((ROWS, K)).astype(np.float32) * rng.uniform(0.01, 3.0, (ROWS, 1)).astype(
        np.float32
    )
    w = quantize(a, dtype)
    want = dequantize(w).reshape(ROWS, K).astype(np.float64)
    got = run_probe(device, w).astype(np.float64)
    assert np.isfinite(got).all()
    nearest = want.astype(np.float16).astype(np.float64)  # the correctly rounded f16 decode
    if dtype in ("f16", "q8_0", "q4_0", "mxfp4"):  # one rounding of an exact product: the nearest f16
        assert np.array_equal(got, nearest)
        return
    if dtype == "q6_k":  # the scale rounded, then the product: within an ulp of the nearest
        ulp = np.spacing(np.abs(nearest).astype(np.float16)).astype(np.float64)
        assert (np.abs(got - nearest) <= ulp).all()
        return
    # q4_1 / q4_k / q5_k subtract a min: scale and min each rounded to f16, then one FMA, so an
    # element is within 2^-10 of its block's largest magnitude plus its own (where the min
    # cancels, many f16 ulps of a small element; a 4-bit quant step is ~2^-4 of the block's).
    block = 256 if dtype.endswith("_k") else 32
    bmax = np.abs(want).reshape(ROWS, K // block, block).max(axis=2).repeat(block, axis=1)
    err = np.abs(got - want)
    bound = 2.0**-10 * (bmax + np.abs(want)) + 2.0**-24
    assert (err <= bound).all(), f"{dtype}: worst err / bound {np.max(err / bound):.3g}"
    assert np.mean(got == nearest) > 0.25  # the f16 decode, not something looser


def test_dequant_half_mxfp4_scales(device):
    """mxfp4 over its block scales: every level at E_KERNEL's top (12 * 2^12), at scales whose f16
    is subnormal (x 103..112: the products rounded once, to even), and flushed to zero below x 103;
    all-zero blocks at any x (0, 255) stay zero."""
    if not device.info.features.get("float16"):
        pytest.skip("no shaderFloat16 (dequant_half runs only in the tensor-core kernels, which need it)")
    from vkdecode.quant.mxfp4 import E_KERNEL

    xs = [E_KERNEL[1], 139, 127, 114, 113, 112, 108, 104, 103, 102, 90, 0, 255, 128, 120, 117]
    rng = np.random.default_rng(3)
    raw = np.zeros((ROWS, K // 32, 17), np.uint8)
    raw[:, :, 0] = np.resize(xs, (ROWS, K // 32))
    idx = rng.integers(0, 256, (ROWS, K // 32, 16), dtype=np.uint8)
    idx[:, :2] = np.arange(16, dtype=np.uint8) * 17  # every level in the first blocks of a row
    zero = np.isin(raw[:, :, 0], (0, 255))
    idx[zero] &= 0x88  # +-0 indices only where x is off E_KERNEL (as load_dtype requires)
    raw[:, :, 1:] = idx
    w = pack_gguf_blocks(raw.reshape(ROWS, -1), "mxfp4", (ROWS, K))
    want = dequantize(w).reshape(ROWS, K).astype(np.float64)
    got = run_probe(device, w).astype(np.float64)
    x = np.repeat(raw[:, :, 0], 32, axis=1)
    nearest = np.where(x < 103, 0.0, want.astype(np.float16).astype(np.float64))
    assert np.isfinite(got).all() and np.array_equal(got, nearest)
    assert np.abs(got).max() == 12 * 2.0 ** (E_KERNEL[1] - 128)
    assert (got[x == 103] != 0).any() and not got[x < 103].any()

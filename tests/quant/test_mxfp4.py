"""vkdecode/quant/mxfp4.py: MXFP4 blocks packed as the mxfp4 dtype hold the file's bytes and give
gguf-py's MXFP4 values bit for bit; the kernels decode every scale in E_KERNEL exactly (and other
blocks only where all-zero), and a tensor with any other block is refused to f32; end to end, an
MXFP4 GGUF loads as mxfp4 and decodes on the device as the reference does."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from tests.helpers.make_models import tiny_hf_model, write_gguf
from tests.helpers.reference_run import greedy_against_reference
from tests.lowering.kernel_harness import caps_of, one_op, run_and_reference, step
from vkdecode.executors import make_executor
from vkdecode.models.gguf_names import source_name
from vkdecode.models.loader import load_model
from vkdecode.models.weights import open_gguf
from vkdecode.quant import PackedWeight, pack_gguf_blocks
from vkdecode.quant import quantize as vk_quantize
from vkdecode.quant.mxfp4 import E_KERNEL, in_kernel_range, kernel_exact, load_dtype, to_raw
from vkdecode.reference import Reference

MX = gguf.GGMLQuantizationType.MXFP4


def block(e: int, idx) -> np.ndarray:
    """One MXFP4 block: e, then the 32 kvalue indices, byte j holding j (low nibble) and j + 16."""
    return np.array([e, *(np.asarray(idx[:16]) | np.asarray(idx[16:]) << 4)], np.uint8)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32).reshape(-1)


@pytest.mark.filterwarnings("ignore:overflow encountered")  # e = 255 with index 7: inf, as gguf
@pytest.mark.parametrize("nb", [1, 3, 4, 5, 90])  # blocks a row: the scale words padded, or not
def test_packed_equals_gguf_bit_for_bit(nb):
    """Random bytes (every e 0..255, every index) packed: the device parts hold the file's bytes (17
    a block, plus the scale row's pad to a word), give them back, and dequantize as gguf-py does."""
    rows = 7
    raw = np.random.default_rng(nb).integers(0, 256, (rows, nb * 17), dtype=np.uint8)
    # the ends of E8M0 and of E_KERNEL first, then every other e
    raw.reshape(-1, 17)[:, 0] = np.resize(np.r_[0, 1, 255, 2, 252, 253, 254, 127, 3:252], rows * nb)
    pw = pack_gguf_blocks(raw, "mxfp4", (rows, nb * 32))
    assert pw.dtype == "mxfp4" and pw.part_bytes == {"q": rows * nb * 16, "s": rows * 4 * -(-nb // 4)}
    assert np.array_equal(to_raw(pw.parts, pw.shape), raw)
    want = dequantize(raw, MX).reshape(rows, nb * 32)
    assert np.array_equal(bits(pw.dequantize()), bits(want))


def test_quantize_packs_gguf_quantizer_blocks():
    x = np.random.default_rng(2).standard_normal((3, 160)).astype(np.float32)
    x[1, 32:64] = 0  # an all-zero block: gguf writes e = 0
    raw = quantize(x, MX)
    assert kernel_exact(raw) and not in_kernel_range(raw.reshape(-1, 17)[:, 0])
    assert np.array_equal(bits(vk_quantize(x, "mxfp4").dequantize()), bits(dequantize(raw, MX)))


@pytest.mark.parametrize(
    "e,idx,ok",
    [
        (E_KERNEL[0], [1] + [15] * 31, True),  # 2^-126 and -12 * 2^-126: normal f32
        (E_KERNEL[1], [7] + [9] * 31, True),  # 12 * 2^12: within f16's 65504 (the tiles)
        (E_KERNEL[0] - 1, [1] + [0] * 31, False),  # 2^-127: an f32 subnormal
        (0, [0] * 16 + [8] * 16, True),  # +-0 indices at any scale
        (255, [8] * 32, True),
        (E_KERNEL[1] + 1, [1] + [0] * 31, False),  # 2^13 fits, but the block's 12 * 2^13 would not
        (255, [0] * 31 + [9], False),
    ],
    ids=["least", "most", "below", "zero-e0", "zero-e255", "above", "e255"],
)
def test_kernel_range(e, idx, ok):
    good = quantize(np.random.default_rng(0).uniform(-1, 1, (2, 128)).astype(np.float32), MX).reshape(-1, 17)
    raw = np.concatenate([good[:3], block(e, idx)[None], good[3:]])
    assert kernel_exact(raw) == ok and load_dtype([raw[:4], raw[4:]]) == ("mxfp4" if ok else "f32")
    assert in_kernel_range(raw[:, 0]) == (E_KERNEL[0] <= e <= E_KERNEL[1])


def test_device_decodes_kernel_range_exactly(device):
    """The embed kernel (dequant_elem; y = row * 1.0) returns every value of blocks at the ends of
    E_KERNEL, and of all-zero blocks off it, bit for bit: dequant.glsl's block_dm is exact. Rows of
    5 blocks: the second scale word a row is padded."""
    rng = np.random.default_rng(5)
    es = [E_KERNEL[0], E_KERNEL[1], 127, 0, 255, 1, 128, 90, 3, 251]  # 0, 255, 1: all-zero blocks
    blocks = [block(e, rng.integers(0, 16, 32)) for e in es]
    for b, e in zip(blocks, es):
        if not E_KERNEL[0] <= e <= E_KERNEL[1]:
            b[1:] &= 0x88  # indices 0 and 8 only
    raw = np.concatenate([np.stack(blocks).reshape(2, -1), np.stack(blocks[::-1]).reshape(2, -1)])
    table = pack_gguf_blocks(raw, "mxfp4", (4, 160))
    assert kernel_exact(raw)
    p = one_op(
        "embed",
        {"t": ((4, 160), "mxfp4", "weight"), "step": ((8,), "u32", "step")},
        {"y": ((160,), "f32", "output")},
    )
    want = dequantize(raw, MX).reshape(4, 160)
    assert (
        np.abs(want).max() == 12 * 2.0 ** (E_KERNEL[1] - 128) and np.abs(want[want != 0]).min() == 2.0**-126
    )
    for tok in range(4):
        got, _ = run_and_reference(device, p, {"t": table, "step": step(tok, 0)}, caps_of(device))
        assert np.array_equal(bits(got["y"]), bits(want[tok])), tok


STEPS = 10


@pytest.mark.parametrize("arch", ["llama", "qwen3moe"])
def test_mxfp4_gguf_decodes_as_reference(device, models_dir, arch):
    """Every matrix MXFP4 in the file (qwen3moe: 3-D stacked experts, as gpt-oss's GGUF files store
    theirs): all mxfp4 on the device in the file's bytes (+ the scale rows' pad), equal to gguf-py's
    MXFP4 values, and the fused executor decodes the reference's tokens on them."""
    path = write_gguf(tiny_hf_model(arch, models_dir), models_dir / f"{arch}-untied.mxfp4.gguf", "mxfp4")
    tensors = {t.name: t for t in open_gguf(str(path)).tensors}
    m = load_model(path, ctx=STEPS)
    mats = [n for n, w in m.weights.items() if len(w.shape) == 2]
    assert {m.meta["source_types"][n] for n in mats} == {"MXFP4"} and not m.meta["notes"]
    for n in mats:
        w, t = m.weights[n], tensors[source_name(n, "gguf", m.args.arch)]
        assert isinstance(w, PackedWeight) and w.dtype == "mxfp4", n
        out, n_in = w.shape
        assert w.nbytes == int(t.n_bytes) + out * (-(-n_in // 128) * 4 - n_in // 32)
        assert np.array_equal(bits(w.dequantize()), bits(dequantize(np.asarray(t.data), MX))), n
    assert any(len(tensors[source_name(n, "gguf", m.args.arch)].shape) == 3 for n in mats) == (
        arch != "llama"
    )
    with make_executor("fused", device, m.program, m.weights) as ex:
        greedy_against_reference(ex, Reference(m.program, m.weights), STEPS)

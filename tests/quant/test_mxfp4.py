"""vkdecode/quant/mxfp4.py: GGUF MXFP4 blocks as q8_0 give gguf-py's MXFP4 values bit for bit
(through gguf-py's own q8_0 dequantize), or None where a block has no exact q8_0 form; end to end,
an MXFP4 GGUF loads as q8_0 and decodes on the device as the reference does."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from tests.helpers.make_models import tiny_hf_model, write_gguf
from tests.helpers.reference_run import greedy_against_reference
from vkdecode.executors import make_executor
from vkdecode.models.gguf_names import source_name
from vkdecode.models.loader import load_model
from vkdecode.models.weights import open_gguf
from vkdecode.quant import pack_gguf_blocks
from vkdecode.quant.mxfp4 import exact, pack_mxfp4, to_q8_0
from vkdecode.reference import Reference

MX, Q8 = gguf.GGMLQuantizationType.MXFP4, gguf.GGMLQuantizationType.Q8_0


def mxfp4_rows(exps, n: int = 256, seed: int = 0) -> np.ndarray:
    """gguf-py's MXFP4 of rows uniform in +-2^p, one row per p: block scales 2^(p - 4) (mostly)."""
    rng = np.random.default_rng(seed)
    x = np.stack([rng.uniform(-1, 1, n) * 2.0**p for p in exps]).astype(np.float32)
    x[0, 32:64] = 0  # an all-zero block (gguf's quantizer writes e = 0: a scale of 2^-128)
    return quantize(x, MX)


def block(e: int, idx) -> np.ndarray:
    """One MXFP4 block: e, then the 32 kvalue indices, byte j holding j (low nibble) and j + 16."""
    return np.array([e, *(np.asarray(idx[:16]) | np.asarray(idx[16:]) << 4)], np.uint8)


def q8_0_bytes(d: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(d, q) as GGUF q8_0 blocks: f16 d, then the 32 int8 q."""
    return np.concatenate([d.view(np.uint8).reshape(-1, 2), q.view(np.uint8)], axis=1)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32).reshape(-1)


def test_q8_0_equals_gguf_mxfp4_bit_for_bit():
    rng = np.random.default_rng(1)
    raw = mxfp4_rows(range(-20, 23))  # exponents -24 (f16's least subnormal) .. 18 (2^3 past 2^15)
    # below f16's range, all quants multiples of 4 (kvalues 0, +-4, +-8): q8_0 holds them as q / 4
    low = np.stack([block(128 - 26, rng.choice([0, 4, 6, 8, 12, 14], 32)) for _ in range(8)])
    raw = np.concatenate([raw.reshape(-1, 17), low])
    e = set((raw[:, 0].astype(int) - 128).tolist())
    assert {-128, -26, -24, -14, 15, 18} <= e, sorted(e)
    d, q = to_q8_0(raw)
    assert d.dtype == np.float16 and q.dtype == np.int8 and exact(raw)
    assert d.min() == np.float16(2.0**-24) and d.max() == np.float16(2.0**15)
    want = dequantize(raw, MX)
    assert np.count_nonzero(want[-8:]) and np.count_nonzero(want[d < 2.0**-14])  # subnormal d: not all zero
    assert np.array_equal(bits(dequantize(q8_0_bytes(d, q), Q8)), bits(want))
    # the packed weight: q8_0's words, as a q8_0 GGUF tensor of those bytes packs to
    pw = pack_mxfp4(raw.reshape(8, -1), (8, raw.size // 17 * 32 // 8))
    ref = pack_gguf_blocks(q8_0_bytes(d, q).reshape(8, -1), "q8_0", pw.shape)
    assert pw.dtype == "q8_0" and all(np.array_equal(pw.parts[k], ref.parts[k]) for k in ("q", "s"))
    assert np.array_equal(bits(pw.dequantize()), bits(want))


@pytest.mark.parametrize(
    "e,bad,fits",
    [
        (128 - 25, [1] + [4] * 31, [4] * 32),  # below f16 by 2^1: an odd kvalue
        (128 - 26, [2] + [6] * 31, [14] * 32),  # below f16 by 2^2: a kvalue no multiple of 4
        (128 + 19, [7] + [5] * 31, [13] * 32),  # above f16 by 2^4: 12 * 16 past int8 (6 * 16 is not)
        (255, [1] + [0] * 31, [8] * 32),  # 2^127: only zeros fit
        (0, [0] * 31 + [15], [0] * 32),  # e = 0 with a nonzero quant
    ],
    ids=["below-odd", "below-4", "above-int8", "e255", "e0"],
)
def test_no_exact_form(e, bad, fits):
    """One block q8_0 cannot hold spoils the tensor; the same scale holding only quants that fit
    (whole after the shift, within int8) is exact."""
    good = mxfp4_rows([0, 3]).reshape(-1, 17)
    raw = np.concatenate([good[:5], block(e, bad)[None], good[5:]])
    assert to_q8_0(raw) is None and not exact(raw)
    with pytest.raises(ValueError):
        pack_mxfp4(raw.reshape(1, -1), (1, raw.shape[0] * 32))
    raw[5] = block(e, fits)
    d, q = to_q8_0(raw)
    assert exact(raw) and np.array_equal(bits(dequantize(q8_0_bytes(d, q), Q8)), bits(dequantize(raw, MX)))


STEPS = 10


@pytest.mark.parametrize("arch", ["llama", "qwen3moe"])
def test_mxfp4_gguf_decodes_as_reference(device, models_dir, arch):
    """Every matrix MXFP4 in the file (qwen3moe: 3-D stacked experts, as gpt-oss's GGUF files store
    theirs): all q8_0 on the device, equal to gguf-py's MXFP4 values, and the fused executor decodes
    the reference's tokens on them."""
    path = write_gguf(tiny_hf_model(arch, models_dir), models_dir / f"{arch}-untied.mxfp4.gguf", "mxfp4")
    tensors = {t.name: t for t in open_gguf(str(path)).tensors}
    m = load_model(path, ctx=STEPS)
    mats = [n for n, w in m.weights.items() if len(w.shape) == 2]
    assert {m.meta["source_types"][n] for n in mats} == {"MXFP4"} and len(m.meta["notes"]) == len(mats)
    assert all(note.endswith("MXFP4 stored as q8_0 (exact)") for note in m.meta["notes"])
    for n in mats:
        w = m.weights[n]
        want = dequantize(np.asarray(tensors[source_name(n, "gguf", m.args.arch)].data), MX)
        assert w.dtype == "q8_0" and np.array_equal(bits(w.dequantize()), bits(want)), n
    assert any(len(tensors[source_name(n, "gguf", m.args.arch)].shape) == 3 for n in mats) == (
        arch != "llama"
    )
    with make_executor("fused", device, m.program, m.weights) as ex:
        greedy_against_reference(ex, Reference(m.program, m.weights), STEPS)

"""quant_k.py / quant.py: the K-quant, q5_1 and iq4_nl word layouts. pack(raw) must dequantize to
exactly what the gguf package's own dequantize makes of the same file bytes, on random raw bytes
(every bit pattern of quants and scales, a valid f16 d) and on quant_k's quantizer output."""

import gguf
import numpy as np
import pytest

from vkdecode.lowering.calls import row_bytes
from vkdecode.quant import dequantize, pack_gguf_blocks, quantize, row_words
from vkdecode.quant import kquant as quant_k

TYPES = list(quant_k.LAYOUTS)
# byte offsets of the f16 fields a random block must hold as finite values
F16_FIELDS = {
    "q4_k": (0, 2),
    "q5_k": (0, 2),
    "q6_k": (208,),
    "q2_k": (80, 82),
    "q3_k": (108,),
    "q5_1": (0, 2),
    "iq4_nl": (0,),
}


def _random_raw(dtype: str, out: int, n_in: int, seed: int = 0) -> np.ndarray:
    n, nbytes = quant_k.LAYOUTS[dtype][:2]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (out, n_in // n, nbytes), dtype=np.uint8)
    for off in F16_FIELDS[dtype]:
        h = (rng.standard_normal((out, n_in // n)) * 0.01).astype(np.float16)
        raw[:, :, off : off + 2] = h.view(np.uint8).reshape(out, n_in // n, 2)
    return raw.reshape(out, -1)


@pytest.mark.parametrize("dtype", TYPES)
def test_random_bytes_dequantize_like_gguf(dtype):
    n_in = 512 if dtype.endswith("_k") else 96
    raw = _random_raw(dtype, 7, n_in)
    w = pack_gguf_blocks(raw, dtype, (7, n_in))
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[dtype.upper()])
    assert np.array_equal(dequantize(w), want.reshape(7, n_in))
    assert np.array_equal(quant_k.to_raw(w.parts, dtype, (7, n_in)), raw)
    for part in ("q", "s"):  # the layout kernels.py binds: words per row as quant.row_words says
        assert w.parts[part].shape == (7, row_words(dtype, n_in, part))
        assert w.row_bytes(part) == row_bytes(dtype, n_in, part)


@pytest.mark.parametrize("dtype", TYPES)
def test_device_bytes_equal_file_bytes(dtype):
    """No expansion: packed words hold the file's bytes (plus q6_k's / iq4_nl's 2-byte pad)."""
    n, nbytes, _, _, pad = quant_k.LAYOUTS[dtype]
    w = pack_gguf_blocks(_random_raw(dtype, 3, 4 * n), dtype, (3, 4 * n))
    assert w.nbytes == 3 * 4 * (nbytes + pad)


@pytest.mark.parametrize("dtype", TYPES)
def test_quantizer_is_close(dtype):
    """quant_k's test quantizer: valid blocks whose values follow the input (rel. rms error)."""
    a = (np.random.default_rng(1).standard_normal((5, 512)) * 0.1).astype(np.float32)
    w = quantize(a, dtype)
    err = np.sqrt(np.mean((dequantize(w) - a) ** 2)) / 0.1
    limit = {
        "q4_k": 0.12,
        "q5_k": 0.06,
        "q6_k": 0.03,
        "q2_k": 0.4,
        "q3_k": 0.25,
        "q5_1": 0.06,
        "iq4_nl": 0.12,
    }
    assert err < limit[dtype], err


def test_in_dim_must_fit_blocks():
    with pytest.raises(ValueError, match="multiple of 256"):
        quant_k.pack(np.zeros((1, 144), np.uint8), "q4_k", (1, 128))

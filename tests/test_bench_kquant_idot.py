"""bench/kquant_idot.py: the prepared x words and the integer-dot q4_k kernel (dequant.glsl KQ_IDOT)
against float64 numpy, beside the float kernel, on this device."""
import numpy as np
import pytest

from bench import kquant_idot


def test_prepared_words_rebuild_x():
    """The three byte planes times 2^-e give x back to within half a step of its unit's scale."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(512) * np.exp(rng.uniform(-6, 6, 512))).astype(np.float32)
    w = kquant_idot.prepare_x(x).reshape(kquant_idot.UNIT_WORDS, -1).T   # word-major in the buffer
    for u in range(w.shape[0]):
        lo, hi = kquant_idot.unit_elements(u)
        step = float(w[u, 24:25].view(np.float32)[0])
        for h, idx in enumerate((lo, hi)):
            for i in range(4):
                b = [w[u, 3 * (2 * i + h) + p].astype("<u4").tobytes() for p in range(3)]
                xi = (np.frombuffer(b[0], np.uint8).astype(np.int64) + (np.frombuffer(b[1], np.uint8).astype(np.int64) << 8)
                      + (np.frombuffer(b[2], np.int8).astype(np.int64) << 16))
                assert np.all(np.abs(xi * step - x[idx[i]]) <= 0.5 * step)
        assert np.isclose(w[u, 25:26].view(np.float32)[0], x[lo].sum(), rtol=1e-5)
    # the units of a 256-element superblock cover each of its elements once
    cover = np.concatenate([np.concatenate([a.ravel() for a in kquant_idot.unit_elements(u)]) for u in range(8)])
    assert sorted(cover) == list(range(256))


def test_integer_dot_kernel_matches_numpy(device):
    if not device.info.features.get("integer_dot"):
        pytest.skip("no shaderIntegerDotProduct on this device")
    rows = kquant_idot.run(device, [(67, 512), (40, 1024)], reps=2, copies=1)
    assert {r["kernel"] for r in rows} == {"float", "idot"}
    # block fixed point of 22 bits per 32 elements: within a few f32 roundings of the float kernel
    assert all(r["rel_error"] < 2e-6 for r in rows), [(r["kernel"], r["rel_error"]) for r in rows]

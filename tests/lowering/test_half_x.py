"""lowering/half_x.py: the coop matmuls' x converted to f16 once, repeats dropped."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps
from vkdecode.lowering.half_x import ROW_SCALES, SCRATCH, drop_repeat_conversions, half_x

CAPS = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, coop_matrix=True)


def _mm(x: str, out: str) -> KernelCall:
    return KernelCall("matmul_rows_coop", (128,), (Binding("w"), Binding(x), Binding(out)), (2,), (1, 1, 1))


def test_half_x_converts_into_the_shared_scratch():
    calls, b, defines, after = half_x("x", 512 * 2048, CAPS)
    (c,) = calls
    assert c.shader == "to_f16" and c.bindings == (Binding("x"), Binding(SCRATCH)) and c.writes == (1,)
    assert c.spec[1] == 512 * 2048 // 4 and c.scratch == ((SCRATCH, 2 * 512 * 2048),)
    assert b == Binding(SCRATCH) and defines == (("X_F16", "1"),) and after == ()
    assert c.groups[0] * c.spec[0] <= 512 * 2048 // 4 and c.groups[0] <= 4096  # grid-stride
    assert half_x("x", 1024, replace(CAPS, coop_x16=-1)) == ([], Binding("x"), (), ())


def test_repeat_conversions_are_dropped_until_x_or_the_scratch_changes():
    (cx,), _, _, _ = half_x("x", 1024, CAPS)
    (cy,), _, _, _ = half_x("y", 1024, CAPS)
    q, k, v = _mm(SCRATCH, "q"), _mm(SCRATCH, "k"), _mm(SCRATCH, "v")
    write_x = KernelCall("add", (64,), (Binding("a"), Binding("x")), (1,), (1, 1, 1))
    calls = [cx, q, cx, k, cx, v, cy, _mm(SCRATCH, "o"), cx, write_x, cx]
    kept, owners = drop_repeat_conversions(calls, list(range(len(calls))))
    # q/k/v share one conversion; x again after y's (the scratch changed) and after x was written
    assert owners == [0, 1, 3, 5, 6, 7, 8, 9, 10]
    assert [c.shader for c in kept].count("to_f16") == 4


def test_row_scaled_x_takes_one_workgroup_a_row_and_binds_the_factors_after_y():
    for caps in (CAPS, replace(CAPS, coop_x16=-1)):  # scaled rows are converted whatever coop_x16 says
        (c,), b, defines, after = half_x("x", 64 * 640, caps, rows=64)
        assert c.shader == "to_f16" and ("ROW_SCALE", "1") in c.defines and c.groups == (64, 1, 1)
        assert c.bindings == (Binding("x"), Binding(SCRATCH), Binding(ROW_SCALES)) and c.writes == (1, 2)
        assert c.spec[1] == 640 // 4 and dict(c.scratch) == {SCRATCH: 2 * 64 * 640, ROW_SCALES: 4 * 64}
        assert b == Binding(SCRATCH) and after == (Binding(ROW_SCALES),)
        assert defines == (("X_F16", "1"), ("X_ROWSCALE", "1"))


def test_to_f16_row_scale_brings_each_row_under_2_to_15_by_a_power_of_two(device):
    """The kernel itself (no tensor cores needed): each row whose max |x| reaches 2^15 divided by the
    least power of two that brings it under, the power stored; other rows' halves are the plain
    conversion's, bit for bit."""
    from fusion.ir import Program
    from tests.lowering.kernel_harness import OpRun, caps_of

    rows, n = 8, 640
    top = np.array([0.5, 3e4, 32768.0, 4e4, 1e6, 3.4e38, 0.0, 65504.0], np.float32)
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (rows, n)).astype(np.float32)
    x[:, 3] = 1.0
    x *= top[:, None]
    p = Program("test-to_f16")
    p.value("x", (rows * n,), "f32", "state")
    p.value("h", (rows * n,), "f16", "output")
    p.value("s", (rows,), "f32", "output")
    caps = caps_of(device)
    (call,), _, _, _ = half_x("x", rows * n, caps, rows=rows)
    call = replace(call, bindings=(Binding("x"), Binding("h"), Binding("s")), scratch=())
    got = OpRun(device, p, {"x": x.ravel()}, caps, calls=[call]).run()
    exp = np.frexp(np.abs(x).max(axis=1))[1]  # max |x| < 2^exp
    want_s = np.ldexp(1.0, np.maximum(0, exp - 15)).astype(np.float32)
    np.testing.assert_array_equal(got["s"], want_s)
    assert list(want_s[:3]) == [1.0, 1.0, 2.0]  # 32768 = 2^15 is past the bound; 3e4 is not
    want_h = (x / want_s[:, None]).astype(np.float16).ravel()
    np.testing.assert_array_equal(got["h"].view(np.uint16), want_h.view(np.uint16))
    assert np.isfinite(got["h"]).all()

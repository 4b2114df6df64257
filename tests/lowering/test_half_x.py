"""lowering/half_x.py: the coop matmuls' x converted to f16 once, repeats dropped."""

from __future__ import annotations

from dataclasses import replace

from vkdecode.lowering.calls import Binding, KernelCall, KernelCaps
from vkdecode.lowering.half_x import SCRATCH, drop_repeat_conversions, half_x

CAPS = KernelCaps(32, True, (1 << 32) - 1, 1024, 49152, 16, coop_matrix=True)


def _mm(x: str, out: str) -> KernelCall:
    return KernelCall("matmul_rows_coop", (128,), (Binding("w"), Binding(x), Binding(out)), (2,), (1, 1, 1))


def test_half_x_converts_into_the_shared_scratch():
    calls, b, defines = half_x("x", 512 * 2048, CAPS)
    (c,) = calls
    assert c.shader == "to_f16" and c.bindings == (Binding("x"), Binding(SCRATCH)) and c.writes == (1,)
    assert c.spec[1] == 512 * 2048 // 4 and c.scratch == ((SCRATCH, 2 * 512 * 2048),)
    assert b == Binding(SCRATCH) and defines == (("X_F16", "1"),)
    assert c.groups[0] * c.spec[0] <= 512 * 2048 // 4 and c.groups[0] <= 4096  # grid-stride
    assert half_x("x", 1024, replace(CAPS, coop_x16=-1)) == ([], Binding("x"), ())


def test_repeat_conversions_are_dropped_until_x_or_the_scratch_changes():
    (cx,), _, _ = half_x("x", 1024, CAPS)
    (cy,), _, _ = half_x("y", 1024, CAPS)
    q, k, v = _mm(SCRATCH, "q"), _mm(SCRATCH, "k"), _mm(SCRATCH, "v")
    write_x = KernelCall("add", (64,), (Binding("a"), Binding("x")), (1,), (1, 1, 1))
    calls = [cx, q, cx, k, cx, v, cy, _mm(SCRATCH, "o"), cx, write_x, cx]
    kept, owners = drop_repeat_conversions(calls, list(range(len(calls))))
    # q/k/v share one conversion; x again after y's (the scratch changed) and after x was written
    assert owners == [0, 1, 3, 5, 6, 7, 8, 9, 10]
    assert [c.shader for c in kept].count("to_f16") == 4

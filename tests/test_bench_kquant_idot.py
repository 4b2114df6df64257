"""bench/kquant_idot.py: the integer-dot wide q4_k / q6_k matvecs (dequant.glsl KQ_IDOT) against
float64 numpy, beside the float kernel, on this device."""
import pytest

from bench import kquant_idot


def test_integer_dot_kernels_match_numpy(device):
    if not device.info.features.get("integer_dot"):
        pytest.skip("no shaderIntegerDotProduct on this device")
    rows = kquant_idot.run(device, [(67, 512), (40, 1024)], ["q4_k", "q6_k"], reps=2, barriers=["full"],
                           copies=1, warm_s=0.0)
    assert {(r["dtype"], r["kernel"]) for r in rows} == {(d, k) for d in ("q4_k", "q6_k") for k in ("float", "idot")}
    # x as 22 bits of each half unit's largest |x|: within a few f32 roundings of the float kernel
    assert all(r["rel_error"] < 2e-6 for r in rows), [(r["dtype"], r["kernel"], r["rel_error"]) for r in rows]

"""bench/kquant_idot.py: the integer-dot wide q4_k / q6_k matvecs (dequant.glsl KQ_IDOT) against
float64 numpy, beside the float kernel, on this device."""

import pytest

from bench import kquant_idot


def test_integer_dot_kernels_match_numpy(device):
    if not device.info.features.get("integer_dot"):
        pytest.skip("no shaderIntegerDotProduct on this device")
    rows = kquant_idot.run(
        device, [(67, 512), (40, 1024)], ["q4_k", "q6_k"], reps=2, barriers=["full"], copies=1, warm_s=0.0
    )
    assert {(r["dtype"], r["kernel"]) for r in rows} == {
        (d, k) for d in ("q4_k", "q6_k") for k in ("float", "idot", "idot3")
    }
    err = {(r["dtype"], r["kernel"]): r["rel_error"] for r in rows}
    # x as 22 bits of each half unit's largest |x| (three planes): within a few f32 roundings of the
    # float kernel; as 15 bits (two): each x off by up to 2^-15 of its group's largest
    assert all(e < 2e-6 for (_, k), e in err.items() if k != "idot"), err
    assert all(e < 1e-4 for e in err.values()), err


def test_integer_dot_passes_non_finite_x_on(device):
    """An inf or NaN in x reaches y as NaN, as in the float kernel, not as a finite fixed-point value."""
    from dataclasses import replace

    import numpy as np

    from bench.matvec_bench import Case, measure
    from vkdecode.lowering.calls import KernelCaps

    if not device.info.features.get("integer_dot"):
        pytest.skip("no shaderIntegerDotProduct on this device")
    caps = replace(KernelCaps.from_info(device.info), kwide=1, kw_split=1)
    for bad in (np.inf, np.nan):
        case = Case(device, "q4_k", 8, 512, copies=1)
        try:
            x = case.x_host.copy()
            x[3] = bad
            case.x.write(x)
            measure(case, caps, reps=1, defines={"KQ_IDOT": 1})
            y = case.y.read_array(np.float32, case.out)
            assert np.isnan(y).all(), y
        finally:
            case.close()

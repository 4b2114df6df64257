"""Wide q4_k / q6_k matvecs on integer dot products (KernelCaps.kq_idot, dequant.glsl KQ_IDOT, for
q6_k with KQ_IDOT_Q6) against the float kernel, side by side in one process, each checked against float64 numpy.

    python -m bench.kquant_idot [--shapes 4096x4096 14336x4096 4096x14336] [--dtypes q4_k q6_k]
                                [--barrier full none] [--out idot.json]

The integer kernel makes each half unit's 16 activations block fixed point in registers (22 bits
of the half's largest |x|), once for all the rows a workgroup holds, so its cost per row shrinks
with the rows. `--barrier none` times back-to-back dispatches that overlap (throughput), `full`
the decode's chain of dependent dispatches. Writes JSON; never asserts timings.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from bench.matvec_bench import Case, copy_bandwidth, measure
from vkdecode.cli.bench import write_json
from vkdecode.lowering.calls import KernelCaps
from vkdecode.quant import PackedWeight, dequantize


def rel_error(case: Case) -> float:
    """max |y - W x| / max |W x| of the case's last result, W dequantized, in float64."""
    w = dequantize(PackedWeight(case.dtype, (case.out, case.n_in), case.parts)).astype(np.float64)
    ref = w @ case.x_host.astype(np.float64)
    y = case.y.read_array(np.float32, case.out).astype(np.float64)
    return float(np.abs(y - ref).max() / np.abs(ref).max())


def run(
    dev,
    shapes: list[tuple[int, int]],
    dtypes: list[str],
    reps: int,
    barriers: list[str],
    copies: int = 0,
    warm_s: float = 0.3,
) -> list[dict]:
    # integer dot products only where a variant's defines ask (GPUs take them by default)
    caps = replace(KernelCaps.from_info(dev.info), kwide=1, kw_split=1, kq_idot=-1)
    rows = []
    for dtype in dtypes:
        for out, n_in in shapes:
            case = Case(dev, dtype, out, n_in, copies)
            idot = {"KQ_IDOT": 1, **({"KQ_IDOT_Q6": 1} if dtype == "q6_k" else {})}
            try:
                measure(case, caps, reps, warm_s=warm_s)  # untimed: first touch, clocks up
                for barrier in barriers:
                    for _ in range(2):  # A, B, A, B
                        # idot: x as two byte planes (the default), idot3: three
                        for name, defines in (
                            ("float", {}),
                            ("idot", idot),
                            ("idot3", {**idot, "KQ_PLANES": 3}),
                        ):
                            r = measure(case, caps, reps, barrier=barrier, defines=defines)
                            r.update(kernel=name, rel_error=rel_error(case))
                            rows.append(r)
                            print(
                                f"{dtype} {out:6d}x{n_in:<6d} {barrier:4s} {name:5s} wg {r['wg']:3d} rows {r['rows']} "
                                f"{r['us']:8.2f} us {r['GBps']:7.0f} GB/s  rel error {r['rel_error']:.1e}  "
                                f"{r['pipeline_stats'].get('Register Count', '')}",
                                flush=True,
                            )
            finally:
                case.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["4096x4096", "14336x4096", "4096x14336"])
    ap.add_argument("--dtypes", nargs="+", default=["q4_k", "q6_k"])
    ap.add_argument("--barrier", nargs="+", default=["full", "none"], choices=["full", "none"])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.vk import Device

    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes]
    with Device() as dev:
        if not dev.info.features.get("integer_dot"):
            raise SystemExit(f"{dev.info.name}: no shaderIntegerDotProduct")
        copy = copy_bandwidth(dev, min(512 << 20, dev.info.limits["max_storage_buffer_range"] & ~0xFFFF))
        res = {
            "device": dev.info.name,
            "driver": dev.info.driver_version,
            "date": time.strftime("%Y-%m-%d"),
            "copy_GBps": copy,
            "rows": run(dev, shapes, a.dtypes, a.reps, a.barrier),
        }
    if a.out:
        write_json(res, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

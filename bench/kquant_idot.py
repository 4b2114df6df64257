"""A q4_k matvec on integer dot products (dequant.glsl KQ_IDOT) against the decode's float kernel,
side by side in one process: the measurement behind the next step of issue 15, not a decode path.

    python -m bench.kquant_idot [--shapes 4096x4096 14336x4096 4096x14336] [--out idot.json]

x is prepared on the host (prepare_x) as the kernel wants it: per 32-element wide unit, block fixed
point x_int = round(x 2^e) with |x_int| <= 2^22 in three byte planes, 2^-e and the unit's two x sums.
Decode would need that preparation once per token on the GPU (a small dispatch or the producer's
epilogue); its cost is not in these timings. Each result is checked against float64 numpy (max
error over max |y|), so a wrong kernel shows. Writes JSON; never asserts timings.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from bench.matvec_bench import Case, copy_bandwidth, measure
from vkdecode.cli_bench import write_json
from vkdecode.kernels import KernelCaps
from vkdecode.quant import PackedWeight, dequantize

UNIT = 32           # elements of a wide q4_k unit (dequant.glsl KWIDE)
UNIT_WORDS = 32     # prepared words per unit (24 plane words, 2^-e, two sums, padding)


def unit_elements(u: int) -> tuple[np.ndarray, np.ndarray]:
    """(low-nibble elements, high-nibble elements) of wide unit u, 4 per q word in word order: the
    elements load_x8 gives narrow units 4u..4u+3 (qs word w of chunk c: 64c+4w.. and 64c+32+4w..)."""
    lo, hi = [], []
    for i in range(4):
        n = 4 * u + i
        b, c, w = n // 32, (n % 32) // 8, n % 8
        base = 256 * b + 64 * c + 4 * w
        lo.append(base + np.arange(4))
        hi.append(base + 32 + np.arange(4))
    return np.stack(lo), np.stack(hi)


def prepare_x(x: np.ndarray) -> np.ndarray:
    """The KQ_IDOT words of x (uint32, UNIT_WORDS per unit, word-major)."""
    units = x.size // UNIT
    out = np.zeros((units, UNIT_WORDS), dtype=np.uint32)
    for u in range(units):
        lo, hi = unit_elements(u)
        vals = x[np.concatenate([lo.ravel(), hi.ravel()])].astype(np.float64)
        amax = float(np.abs(vals).max())
        ex = np.frexp(amax)[1] if amax > 0 else 0        # amax < 2^ex
        scale = np.ldexp(1.0, 22 - ex)                   # |x| 2^(22 - ex) < 2^22
        for h, idx in enumerate((lo, hi)):
            xi = np.rint(x[idx].astype(np.float64) * scale).astype(np.int64)   # [4 words, 4 elements]
            planes = [xi & 0xFF, (xi >> 8) & 0xFF, (xi >> 16) & 0xFF]      # plane 2: signed byte
            for i in range(4):
                for p, pl in enumerate(planes):
                    out[u, 3 * (2 * i + h) + p] = int(sum(int(pl[i, k]) << (8 * k) for k in range(4)))
        out[u, 24] = np.float32(1.0 / scale).view(np.uint32)
        out[u, 25] = np.float32(x[lo].astype(np.float64).sum()).view(np.uint32)
        out[u, 26] = np.float32(x[hi].astype(np.float64).sum()).view(np.uint32)
    return out.T.ravel()     # word j of unit u at j * units + u: adjacent invocations read adjacent words


def rel_error(case: Case) -> float:
    """max |y - W x| / max |W x| of the case's last result, W dequantized, in float64."""
    w = dequantize(PackedWeight(case.dtype, (case.out, case.n_in), case.parts)).astype(np.float64)
    ref = w @ case.x_host.astype(np.float64)
    y = case.y.read_array(np.float32, case.out).astype(np.float64)
    return float(np.abs(y - ref).max() / np.abs(ref).max())


def run(dev, shapes: list[tuple[int, int]], reps: int, copies: int = 0) -> list[dict]:
    caps = replace(KernelCaps.from_info(dev.info), kwide=1)
    rows = []
    for out, n_in in shapes:
        case = Case(dev, "q4_k", out, n_in, copies)
        xq = dev.buffer(n_in // UNIT * UNIT_WORDS * 4)
        xq.write(prepare_x(case.x_host))
        try:
            measure(case, caps, reps)              # untimed: first touch of the buffers
            for _ in range(2):                     # A, B, A, B
                for name, kw in (("float", {}), ("idot", {"defines": {"KQ_IDOT": 1}, "x": xq})):
                    r = measure(case, caps, reps, **kw)
                    r.update(kernel=name, rel_error=rel_error(case))
                    rows.append(r)
                    print(f"q4_k {out:6d}x{n_in:<6d} {name:5s} wg {r['wg']:3d} rows {r['rows']} {r['us']:8.2f} us "
                          f"{r['GBps']:7.0f} GB/s  rel error {r['rel_error']:.1e}  {r['pipeline_stats'].get('Register Count', '')}",
                          flush=True)
        finally:
            xq.close()
            case.close()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["4096x4096", "14336x4096", "4096x14336"])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    from vkdecode.vk import Device
    shapes = [tuple(int(v) for v in s.split("x")) for s in a.shapes]
    with Device() as dev:
        if not dev.info.features.get("integer_dot"):
            raise SystemExit(f"{dev.info.name}: no shaderIntegerDotProduct")
        copy = copy_bandwidth(dev, min(512 << 20, dev.info.limits["max_storage_buffer_range"] & ~0xFFFF))
        res = {"device": dev.info.name, "driver": dev.info.driver_version, "date": time.strftime("%Y-%m-%d"),
               "copy_GBps": copy, "rows": run(dev, shapes, a.reps)}
    if a.out:
        write_json(res, a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

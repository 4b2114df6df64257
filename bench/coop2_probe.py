"""The rate of VK_NV_cooperative_matrix2's workgroup-scope matmul (bench/shaders/coop2_gemm.comp)
on the prompt chunks' shapes, where the driver stages the tiles itself: against the ~120 TFLOP/s
of the KHR kernel (shaders/matmul_rows_coop.comp) whose own staging the ceiling probes
(bench/coop_ceiling.py) found to halve its rate twice. f16 or q4_k weights, f16 or f32 chunk
rows (the latter two decoded inside the driver's loads), f32 sums; first checked against numpy
(exact and partial tiles), then timed (median of --reps, timestamps).

    bash bench/fetch_glslang15.sh      # once: Debian 13's glslang 15 (GL_NV_cooperative_matrix2)
    python -m bench.coop2_probe [--out coop2.json]
Writes JSON; never asserts timings. Needs VK_NV_cooperative_matrix2 (NVIDIA); enables it for this
process only (VKDECODE_COOP2=1, vk/probe.py)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from bench.shaders import path as probe_shader
from bench.shaders import timed_dispatch

# (T chunk rows, M weight rows, K): Llama-3.1-8B's q/o, gate/up and down over a 512-token chunk;
# the first again at the end (twice the card ran everything past some point 3-4x slower to the end
# of the process, 2026-11-27-coop-ceiling/: the repeat shows whether it did here)
SHAPES = ((512, 4096, 4096), (512, 4096, 14336), (512, 14336, 4096), (512, 4096, 4096))
# (BT, BM, BK, workgroup size): the accumulator is BM x BT
TILES = ((128, 128, 64, 256), (128, 256, 64, 256), (64, 128, 64, 128), (128, 128, 32, 256))
# (weights, chunk rows): f16 x f16 (the first probe), then vkdecode's q4_k words and f32 rows
# decoded inside the driver's loads (the prompt path's real inputs)
VARIANTS = (("f16", "f16"), ("q4_k", "f32"), ("q4_k", "f16"), ("f16", "f32"))
CHECKS = ((128, 256, 512), (200, 384, 512))
# q4_k weights: the real decode, then two timing probes of its cost (not checked: other values)
Q4K_MODES = {"q4_k": 0, "q4_k_nos": 1, "q4_k_bare": 2}  # an exact shape, then partial tiles of T and M


def _inputs(dev, wdt, xdt, t, m, k, rng):
    """(buffers W..X in binding order, dequantized W f32, X f32); rng None: unfilled (timing)."""
    from vkdecode.quant.blocks import quantize

    bufs, w32, x32 = [], None, None
    if wdt in Q4K_MODES:
        if rng is None:
            bufs += [dev.buffer(m * k // 2), dev.buffer(m * k // 16)]
        else:
            pw = quantize(rng.standard_normal((m, k)).astype(np.float32), "q4_k")
            w32 = pw.dequantize()
            for part in ("q", "s"):
                b = dev.buffer(pw.parts[part].nbytes)
                b.write(pw.parts[part].tobytes())
                bufs.append(b)
    else:
        bufs.append(dev.buffer(m * k * 2))
        if rng is not None:
            w16 = rng.standard_normal((m, k)).astype(np.float16)
            w32 = w16.astype(np.float32)
            bufs[-1].write(w16.tobytes())
    bx = dev.buffer(t * k * (4 if xdt == "f32" else 2))
    if rng is not None:
        x32 = rng.standard_normal((t, k)).astype(np.float16).astype(np.float32)
        bx.write(x32.astype(np.float32 if xdt == "f32" else np.float16).tobytes())
    return bufs + [bx], w32, x32


def run(dev, wdt, xdt, t, m, k, tile, rng=None, reps: int = 5):
    """(median µs, Y or None): Y = X W^T on the GPU; rng given: random inputs, Y read back."""
    bt, bm, bk, wg = tile
    defines = {"BT": bt, "BM": bm, "BK": bk}
    defines.update({"Q4K": 1, "Q4K_MODE": Q4K_MODES[wdt]} if wdt in Q4K_MODES else {})
    defines.update({"XF32": 1} if xdt == "f32" else {})
    ins, w32, x32 = _inputs(dev, wdt, xdt, t, m, k, rng)
    by = dev.buffer(t * m * 4)
    pipe = dev.pipeline(probe_shader("coop2_gemm"), (wg, t, m, k), defines, len(ins) + 1)
    checking = rng is not None  # one untimed-quality dispatch, no warm-up
    groups = (-(-m // bm), -(-t // bt))
    us = timed_dispatch(
        dev, pipe, ins + [by], groups, reps, inner=1 if checking else 8, warm_s=0 if checking else 0.3
    )
    err = None
    if rng is not None:
        want = x32 @ w32.T
        y = np.frombuffer(by.read(), np.float32).reshape(t, m)
        err = float(np.abs(y - want).max() / np.abs(want).max())
    for o in ins + [by]:
        o.close()
    return us, err


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--variants", nargs="+", help="WEIGHTS/ROWS, e.g. q4_k/f16 q4_k_nos/f16 (default: VARIANTS)"
    )
    ap.add_argument("--tiles", nargs="+", help="BTxBMxBK/WG, e.g. 128x128x64/256 (default: TILES)")
    a = ap.parse_args()
    variants = [tuple(v.split("/")) for v in a.variants] if a.variants else VARIANTS
    tiles = [tuple(int(x) for x in t.replace("/", "x").split("x")) for t in a.tiles] if a.tiles else TILES
    os.environ["VKDECODE_COOP2"] = "1"  # before the device is made: vk/probe.py chains the features
    os.environ.setdefault("VKDECODE_GLSLANG_CM2", str(Path(__file__).resolve().parent / "glslang15.sh"))
    from vkdecode.vk.device import Device

    rows, checked = [], {}
    with Device() as dev:
        if not dev.info.features.get("coop2"):
            raise SystemExit(
                f"{dev.info.name}: no VK_NV_cooperative_matrix2 workgroup scope + tensor addressing"
            )
        rng = np.random.default_rng(0)
        for wdt, xdt in [v for v in variants if v[0] in ("f16", "q4_k")]:
            for shape in CHECKS:
                for tile in tiles:
                    _, err = run(dev, wdt, xdt, *shape, tile, rng, reps=1)
                    key = "{}/{} {}x{}x{} tile {}x{}x{}/{}".format(wdt, xdt, *shape, *tile)
                    checked[key] = err
                    print(f"{dev.info.name}: check {key}: max rel err {err:.2e}", flush=True)
        for wdt, xdt in variants:
            for shape in SHAPES:
                for tile in tiles:
                    us, _ = run(dev, wdt, xdt, *shape, tile, reps=a.reps)
                    tflops = 2 * shape[0] * shape[1] * shape[2] / us / 1e6
                    rows.append(
                        {"w": wdt, "x": xdt, "shape": shape, "tile": tile, "us": us, "tflops": tflops}
                    )
                    print(
                        f"{dev.info.name}: {wdt}/{xdt} {shape} tile {tile}: {us:8.1f} µs {tflops:7.1f} TFLOP/s",
                        flush=True,
                    )
        res = {"device": dev.info.name, "driver": dev.info.driver_version, "check": checked, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

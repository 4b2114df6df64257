"""The rate of VK_NV_cooperative_matrix2's workgroup-scope matmul (bench/shaders/coop2_gemm.comp)
on the prompt chunks' shapes, where the driver stages the tiles itself: against the ~120 TFLOP/s
of the KHR kernel (shaders/matmul_rows_coop.comp) whose own staging the ceiling probes
(bench/coop_ceiling.py) found to halve its rate twice. f16 weights and chunk rows, f32 sums;
first checked against numpy on a small shape, then timed (median of --reps, timestamps).

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

# (T chunk rows, M weight rows, K): Llama-3.1-8B's q/o, gate/up and down over a 512-token chunk
SHAPES = ((512, 4096, 4096), (512, 14336, 4096), (512, 4096, 14336))
# (BT, BM, BK, workgroup size): llama.cpp-sized workgroup tiles and two neighbours
TILES = ((128, 128, 32, 256), (64, 128, 32, 128), (128, 256, 32, 256), (128, 128, 64, 256), (64, 64, 32, 128))
CHECK = (128, 256, 512)  # the correctness shape


def run(dev, t, m, k, tile, x: np.ndarray | None = None, w: np.ndarray | None = None, reps: int = 5):
    """(median µs, Y or None): Y = X W^T on the GPU; x, w given: Y read back (else not filled)."""
    bt, bm, bk, wg = tile
    defines = {"BT": bt, "BM": bm, "BK": bk}
    pipe = dev.pipeline(probe_shader("coop2_gemm"), (wg, t, m, k), defines, 3)
    bx, bw, by = dev.buffer(t * k * 2), dev.buffer(m * k * 2), dev.buffer(t * m * 4)
    if x is not None:
        bx.write(x.astype(np.float16).tobytes())
        bw.write(w.astype(np.float16).tobytes())
    us = timed_dispatch(dev, pipe, [bx, bw, by], (m // bm, t // bt), reps)
    y = np.frombuffer(by.read(), np.float32).reshape(t, m).copy() if x is not None else None
    for o in (bx, bw, by):
        o.close()
    return us, y


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    os.environ["VKDECODE_COOP2"] = "1"  # before the device is made: vk/probe.py chains the features
    os.environ.setdefault("VKDECODE_GLSLANG_CM2", str(Path(__file__).resolve().parent / "glslang15.sh"))
    from vkdecode.vk.device import Device

    rows = []
    with Device() as dev:
        if not dev.info.features.get("coop2"):
            raise SystemExit(
                f"{dev.info.name}: no VK_NV_cooperative_matrix2 workgroup scope + tensor addressing"
            )
        rng = np.random.default_rng(0)
        t, m, k = CHECK
        x = rng.standard_normal((t, k)).astype(np.float16)
        w = rng.standard_normal((m, k)).astype(np.float16)
        want = x.astype(np.float32) @ w.astype(np.float32).T
        checked = {}
        for tile in TILES:
            _, y = run(dev, t, m, k, tile, x, w, reps=1)
            err = float(np.abs(y - want).max() / np.abs(want).max())
            checked["{}x{}x{}/{}".format(*tile)] = err
            print(f"{dev.info.name}: tile {tile} check {t}x{m}x{k}: max rel err {err:.2e}", flush=True)
        for shape in SHAPES:
            for tile in TILES:
                us, _ = run(dev, *shape, tile, reps=a.reps)
                tflops = 2 * shape[0] * shape[1] * shape[2] / us / 1e6
                rows.append({"shape": shape, "tile": tile, "us": us, "tflops": tflops})
                print(f"{dev.info.name}: {shape} tile {tile}: {us:8.1f} µs {tflops:7.1f} TFLOP/s", flush=True)
        res = {"device": dev.info.name, "driver": dev.info.driver_version, "check": checked, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

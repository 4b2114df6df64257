"""What bounds the tensor-core matmul: the rate of its pieces, one probe kernel per step
(bench/shaders/coop_ceiling.comp): the multiplies alone, + the fragment loads from shared memory,
+ the tile's stores and barriers (one or two shared buffers), + the tile read from memory (f16
weights of the 8B's gate/up shape, 14336 x 4096, and 512 f32 chunk rows), per tile shape, k step
and shared element type. TFLOP/s from timestamps, median of --reps.

    python -m bench.coop_ceiling [--out ceiling.json] [--quick]
Writes JSON; never asserts timings. Needs VK_KHR_cooperative_matrix."""

from __future__ import annotations

import argparse
import json

from bench.shaders import path as probe_shader
from bench.shaders import timed_dispatch
from vkdecode.vk.device import Device

# (SG_M, SG_N, BLK_M, BLK_N) as vkdecode.lowering.coop's tiles: the automatic 512-row tile first
TILES = ((2, 2, 2, 4), (2, 2, 4, 4), (4, 4, 2, 2), (2, 4, 2, 4), (1, 1, 4, 4), (2, 2, 4, 2), (1, 4, 4, 4))
ELEMS = {0: "uvec2", 1: "float16_t", 2: "uvec4"}


WROWS, XROWS, K = 14336, 512, 4096  # MODE 4's matmul: the 8B's gate/up over a 512-row chunk


def shared_bytes(tile, mode: int, bk: int) -> int:
    sg_m, sg_n, blk_m, blk_n = tile
    return (2 if mode >= 3 else 1) * 16 * (blk_m * sg_m + blk_n * sg_n) * (bk + 8) * 2


def run_probe(
    dev, tile, mode: int, elem: int, brow: bool, iters: int, groups: int, reps: int, bk: int = 32
) -> dict:
    sg_m, sg_n, blk_m, blk_n = tile
    wg = 32 * sg_m * sg_n
    defines = {
        "SG_M": sg_m,
        "SG_N": sg_n,
        "BLK_M": blk_m,
        "BLK_N": blk_n,
        "MODE": mode,
        "ELEM": elem,
        "BK": bk,
    }
    if brow:
        defines["BROW"] = 1
    bufs = []
    if mode == 4:
        iters, groups = K // bk, (WROWS // (16 * blk_m * sg_m)) * (XROWS // (16 * blk_n * sg_n))
        bufs = [dev.buffer(WROWS * K * 2), dev.buffer(XROWS * K * 4)]
    pipe = dev.pipeline(probe_shader("coop_ceiling"), (wg, iters, WROWS), defines, 1 + len(bufs))
    out = dev.buffer(groups * sg_m * sg_n * 256 * 4)
    us = timed_dispatch(dev, pipe, [out, *bufs], (groups,), reps)
    for o in (out, *bufs):
        o.close()
    ksteps = iters * (bk // 16 if mode >= 2 else 1)  # k steps of 16
    flop = groups * sg_m * sg_n * blk_m * blk_n * ksteps * 2 * 16**3
    return {
        "tile": "{}x{}:{}x{}".format(*tile),
        "mode": mode,
        "elem": ELEMS[elem],
        "b_layout": "row" if brow else "col",
        "bk": bk,
        "shared_bytes": shared_bytes(tile, mode, bk),
        "us": us,
        "tflops": flop / us / 1e6,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--groups", type=int, default=132 * 16, help="workgroups (several waves of an H100's 132 SMs)"
    )
    ap.add_argument("--quick", action="store_true", help="the automatic tile only")
    a = ap.parse_args()
    rows = []
    with Device() as dev:
        if dev.info.features.get("coop") != "khr":
            raise SystemExit(f"{dev.info.name}: no tensor-core path ({dev.info.features.get('coop_reason')})")
        max_shared = dev.info.limits["max_shared_memory"]
        cases = [(TILES[0], mode, 0, False, 32) for mode in (0, 1)]
        for tile in TILES[:1] if a.quick else TILES:
            cases += [(tile, mode, 0, False, bk) for mode in (2, 3) for bk in (32, 64)]
        for mode in (1, 2):  # the shared element type and B's layout, on the automatic tile
            for elem, brow in ((1, False), (2, False), (0, True)):
                cases.append((TILES[0], mode, elem, brow, 32))
        # the tile from memory last (an H200 ran every later probe 3-4x slower after these once),
        # then the first probes again: a drift check
        cases += [(tile, 4, 0, False, bk) for tile in (TILES[:1] if a.quick else TILES) for bk in (32, 64)]
        cases += [(TILES[0], mode, 0, False, 32) for mode in (0, 1, 2)]
        for tile, mode, elem, brow, bk in cases:
            if shared_bytes(tile, mode, bk) > max_shared:
                continue
            r = run_probe(dev, tile, mode, elem, brow, 256 if mode < 2 else 128, a.groups, a.reps, bk)
            rows.append(r)
            print(
                f"{dev.info.name}: tile {r['tile']:9s} mode {mode} BK {bk:3d} {r['elem']:9s} B {r['b_layout']}: "
                f"{r['us']:8.1f} µs {r['tflops']:7.1f} TFLOP/s",
                flush=True,
            )
        res = {"device": dev.info.name, "driver": dev.info.driver_version, "groups": a.groups, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()

"""Which recorded batch width runs n live sequences (executors/batch.py).

By default the narrowest width that holds them. On a GPU a wider step can cost less than a
narrower one, because its matmuls take other kernels: on the H200, Llama-3.1-8B Q4_K_M's 8-row
step (the decode matvec over 8 rows) took 20.8 ms and its 16-row step (the tensor cores' narrow
tiles) 17 ms (bench/results/nvidia-h200/2026-11-27-batch-wide, 2026-11-27-narrow-coop), so 5-8
sequences ran faster in the 16-wide step. `calibrate` times steps of every width, their rows all
padding, and maps each count of sequences to the cheapest width that holds them; a wider width
must save WIDER_MARGIN of the narrowest one's time, so timing noise keeps the narrow choice.
"""

from __future__ import annotations

import time

WIDER_MARGIN = 0.1  # a wider width is picked only when it is at least this much cheaper
WARM_S, WARM_MIN = 0.3, 2  # untimed rounds over every width first: at least 2, and 0.3 s
REPS = 5  # timed rounds (median), each width once a round
# Why rounds over all widths, warmed first: an idle GPU's clocks come up slowly (bench/README.md,
# stream_floor.py: 0.3 s); on the H200 the first width a process ran took 8.6 ms a step over its
# first 16 steps, 4.9 after (the 8B's 2-row step, bench/results/nvidia-h200/2026-11-27-batch-fuse/),
# and timing each width to the end before the next put such drift on some widths only.


def fastest_widths(cost: dict[int, float]) -> dict[int, int]:
    """{n: width} for n = 1 .. the widest: the width >= n of least cost, the narrowest such one
    unless a wider one costs WIDER_MARGIN less."""
    widths = sorted(cost)
    pick = {}
    for n in range(1, widths[-1] + 1):
        fits = [w for w in widths if w >= n]
        best = fits[0]
        for w in fits[1:]:
            if cost[w] < cost[best] * (1.0 - WIDER_MARGIN):
                best = w
        pick[n] = best
    return pick


def step_seconds(batch) -> dict[int, float]:
    """Wall seconds of one step per width (median of REPS rounds, after untimed ones), every
    row padding: the padding slot's rows are written, no sequence's. Call with no sequence live;
    the step buffer is rewritten at the next step, and the runners' step records of these steps
    are dropped."""
    if batch.rows or batch.joining is not None:
        raise RuntimeError("step_seconds needs an empty batch")
    times: dict[int, list[float]] = {w: [] for w in batch.runners}
    start, warm = time.perf_counter(), 0
    while warm < WARM_MIN or time.perf_counter() - start < WARM_S:
        _round(batch, None)
        warm += 1
    for _ in range(REPS):
        _round(batch, times)
    batch.written = None
    return {w: sorted(ts)[len(ts) // 2] for w, ts in times.items()}


def _round(batch, times: dict | None) -> None:
    """One all-padding step of every width (each one's wall seconds into times, if given)."""
    for w, ex in batch.runners.items():
        batch.write_rows(ex, w, [])
        t = time.perf_counter()
        ex.step(0, 0)
        ex.plan.read("next_token", "uint32")
        if times is not None:
            times[w].append(time.perf_counter() - t)
        del ex.token_stats[:]


def calibrate(batch) -> dict[int, int]:
    """Time the batch's widths and let it run each count of sequences at the cheapest (the times
    stay in batch.pick_ms for /metrics)."""
    cost = step_seconds(batch)
    batch.pick_ms = {w: round(1e3 * c, 3) for w, c in sorted(cost.items())}
    batch.pick = fastest_widths(cost)
    return batch.pick

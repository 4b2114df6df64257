"""bench/shaders' timed_dispatch (the tensor-core probes' timer): a positive median, the
descriptor pool, timestamps and command buffer it made closed again, the buffers left alone."""

from __future__ import annotations

from bench.shaders import timed_dispatch


def test_timed_dispatch_times_and_cleans_up(device):
    pipe = device.pipeline("add", (64, 1024), {}, 3)
    bufs = [device.buffer(4096) for _ in range(3)]
    before = device.live_objects()
    us = timed_dispatch(device, pipe, bufs, (16,), reps=2)
    assert us > 0 and device.live_objects() == before
    for b in bufs:
        b.close()

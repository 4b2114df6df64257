"""Ownership: create/close many objects, idempotent close, and device close closes children."""

from __future__ import annotations

import numpy as np

from tests.helpers.shaders import TEST_SCALE
from vkdecode.vk import Device, write_descriptor_set


def _live(device, kind):
    return device.live_objects().get(kind, 0)


def test_thousand_buffers(device):
    base = _live(device, "Buffer")
    bufs = [device.buffer(256, host_visible=bool(i % 2), name=f"b{i}") for i in range(1000)]
    assert _live(device, "Buffer") == base + 1000
    for b in bufs:
        b.close()
    assert _live(device, "Buffer") == base
    bufs[0].close()  # twice is harmless
    assert _live(device, "Buffer") == base


def test_thousand_descriptor_sets(device):
    pipe = device.pipeline(TEST_SCALE, spec=(64, 1.0, 0.0), n_bindings=2, push_size=4)
    pool = device.descriptor_pool(1000, 2000)
    buf = device.buffer(1024, name="shared")
    base_writes = device.counters.descriptor_writes
    for _ in range(1000):
        dset = pool.allocate(pipe)
        write_descriptor_set(device, dset, [(buf, 0, 512), (buf, 512, 512)])
    assert _live(device, "DescriptorSet") >= 1000
    assert device.counters.descriptor_writes - base_writes == 2000
    pool.reset()
    assert pool.live_sets == 0
    pool.allocate(pipe)  # the pool is usable again after reset
    pool.close()
    pool.close()
    buf.close()
    assert _live(device, "DescriptorPool") == 0 and _live(device, "DescriptorSet") == 0


def test_pipelines_close_to_zero(device):
    base = _live(device, "Pipeline")
    pipes = [
        device.pipeline(TEST_SCALE, spec=(64, float(i), 0.0), n_bindings=2, push_size=4)
        for i in range(100, 120)
    ]
    assert _live(device, "Pipeline") == base + 20
    for p in pipes:
        p.close()
        p.close()
    assert _live(device, "Pipeline") == base
    again = device.pipeline(TEST_SCALE, spec=(64, 100.0, 0.0), n_bindings=2, push_size=4)
    assert again is not pipes[0] and again.handle is not None  # a closed pipeline leaves the cache
    again.close()


def test_device_close_closes_children_in_reverse_order():
    dev = Device()
    try:
        buf = dev.buffer(64, host_visible=True)
        buf.write(np.arange(16, dtype=np.uint32))
        pipe = dev.pipeline(TEST_SCALE, spec=(64, 1.0, 0.0), n_bindings=2, push_size=4)
        pool = dev.descriptor_pool(4, 8)
        pool.allocate(pipe)
        cmd = dev.command_buffer()
        ts = dev.timestamp_pool(2)
        arena = dev.arena(1 << 12)
        arena.alloc(100)
        assert sum(dev.live_objects().values()) >= 7
        order = []
        for obj in (buf, pipe, pool, cmd, ts, arena.buffers[0]):
            orig = obj.close
            obj.close = lambda o=obj, f=orig: (order.append(type(o).__name__), f())
        errors = list(dev.validation_errors)
    finally:
        dev.close()
    assert order == ["Buffer", "TimestampPool", "CommandBuffer", "DescriptorPool", "Pipeline", "Buffer"]
    assert dev.live_objects() == {}
    dev.close()  # twice is harmless
    buf.close()
    arena.close()
    assert errors == []


def test_context_manager_device():
    with Device() as dev:
        with dev.buffer(16) as buf:
            buf.write(b"abcd" * 4)
            assert buf.read() == b"abcd" * 4
        assert dev.live_objects().get("Buffer", 0) == 0
        assert dev.validation_errors == []
    assert dev.handle is None

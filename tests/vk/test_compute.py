"""Compute round trips through the test shader, staging, binding limits, timestamps, counters."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tests.helpers.shaders import TEST_SCALE
from vkdecode.errors import VulkanError
from vkdecode.vk import check_binding_range, split_ranges, write_descriptor_set

WG = 64


def scale(device, x: np.ndarray, a: float, b: float, host_visible: bool, pool=None) -> np.ndarray:
    """y = x * a + b on the GPU; every object made here is closed again."""
    n = x.size
    bx = device.buffer(n * 4, host_visible=host_visible, name="x")
    by = device.buffer(n * 4, host_visible=host_visible, name="y")
    own_pool = pool is None
    pool = pool or device.descriptor_pool(1, 2)
    cmd = device.command_buffer()
    try:
        bx.write(x)
        pipe = device.pipeline(TEST_SCALE, spec=(WG, a, b), n_bindings=2, push_size=4)
        dset = pool.allocate(pipe)
        write_descriptor_set(device, dset, [(bx, 0, n * 4), (by, 0, n * 4)])
        cmd.begin()
        cmd.bind(pipe, dset)
        cmd.push(pipe, struct.pack("<I", n))
        cmd.dispatch(-(-n // WG))
        cmd.host_barrier()
        cmd.end()
        device.submit([cmd])
        return by.read_array(np.float32, n)
    finally:
        for obj in (cmd, by, bx) + ((pool,) if own_pool else ()):
            obj.close()


@pytest.mark.parametrize("host_visible", [False, True], ids=["device_local", "host_visible"])
@pytest.mark.parametrize("n", [1, 63, 64, 65, 1000])
def test_round_trip_exact(device, host_visible, n):
    x = (np.arange(n, dtype=np.float32) - 7.0) * 0.5
    y = scale(device, x, 2.0, 1.0, host_visible)
    assert np.array_equal(y, x * np.float32(2.0) + np.float32(1.0))


def test_spec_constants_change_result(device):
    x = np.arange(100, dtype=np.float32)
    assert np.array_equal(scale(device, x, 3.0, -2.0, True), x * 3 - 2)
    assert np.array_equal(scale(device, x, 0.5, 10.0, True), x * 0.5 + 10)
    assert device.pipeline(TEST_SCALE, spec=(WG, 3.0, -2.0), n_bindings=2, push_size=4) is device.pipeline(
        TEST_SCALE, spec=(WG, 3.0, -2.0), n_bindings=2, push_size=4
    )


def test_staged_upload_larger_than_staging_chunk(device):
    nbytes = 40 << 20
    assert nbytes > device.staging_chunk
    data = np.random.default_rng(0).integers(0, 2**32, nbytes // 4, dtype=np.uint32)
    buf = device.buffer(nbytes, name="big")
    try:
        assert not buf.host_visible
        buf.write(data)
        assert np.array_equal(buf.read_array(np.uint32, data.size), data)
        buf.write(b"\x01\x02\x03\x04\x05", offset=17 << 20)  # straddles no chunk edge but is unaligned
        assert buf.read(5, offset=17 << 20) == b"\x01\x02\x03\x04\x05"
    finally:
        buf.close()


def test_host_visible_write_u32_and_bounds(device):
    with device.buffer(64, host_visible=True, name="step") as buf:
        assert buf.address != 0
        buf.write(bytes(64))
        buf.write_u32(2, (7, 8, 9))
        assert buf.read_array(np.uint32, 6).tolist() == [0, 0, 7, 8, 9, 0]
        with pytest.raises(VulkanError, match="outside"):
            buf.write(bytes(8), offset=60)


def test_binding_range_above_limit_refused(device):
    limit = device.info.limits["max_storage_buffer_range"]
    check_binding_range(device, limit)
    with pytest.raises(VulkanError, match="maxStorageBufferRange"):
        check_binding_range(device, limit + 1)
    pipe = device.pipeline(TEST_SCALE, spec=(WG, 1.0, 0.0), n_bindings=2, push_size=4)
    pool = device.descriptor_pool(1, 2)
    buf = device.buffer(256, name="small")
    try:
        dset = pool.allocate(pipe)
        with pytest.raises(VulkanError, match="maxStorageBufferRange"):
            write_descriptor_set(device, dset, [(buf, 0, limit + 4), (buf, 0, 256)])
        with pytest.raises(VulkanError, match="out of bounds"):
            write_descriptor_set(device, dset, [(buf, 0, 512), (buf, 0, 256)])
    finally:
        buf.close()
        pool.close()


def test_split_ranges_cover_exactly():
    pieces = split_ranges(1000, 300, 64)
    assert pieces == [(0, 256), (256, 256), (512, 256), (768, 232)]
    assert all(o % 64 == 0 and s <= 300 for o, s in pieces)


def test_arena_alignment_and_large_tensor(device):
    arena = device.arena(1 << 16)
    try:
        align = max(16, device.info.limits["min_storage_buffer_offset_alignment"])
        a, b = arena.alloc(10, "a"), arena.alloc(100, "b")
        big = arena.alloc(1 << 17, "big")
        assert a.buffer is b.buffer and b.offset % align == 0 and b.offset >= 10
        assert big.buffer is not a.buffer and big.offset == 0
        b.write(np.arange(25, dtype=np.float32))
        assert np.array_equal(b.read_array(np.float32, 25), np.arange(25, dtype=np.float32))
        with pytest.raises(VulkanError):
            a.write(bytes(11))
        assert len(arena.buffers) == 2
    finally:
        arena.close()
        arena.close()


def test_arena_expect_sizes_chunks_to_the_tensors(device):
    """expect(): chunks no larger than the announced bytes; past them, small tail chunks."""
    from vkdecode.vk.memory import TAIL_CHUNK

    arena = device.arena(1 << 20)
    try:
        sizes = [300_000, 300_000, 300_000, 300_000, 100]  # 1.2 MB announced in 1 MiB chunks
        arena.expect(sum(arena.padded(n) for n in sizes))
        for i, n in enumerate(sizes):
            arena.alloc(n, f"t{i}")
        assert len(arena.buffers) == 2 and arena.buffers[0].size == 1 << 20
        assert arena.buffers[1].size == arena.padded(300_000) + arena.padded(100)  # what was left
        late = arena.alloc(1000, "scratch")  # not announced
        assert late.buffer.size == min(1 << 20, TAIL_CHUNK)
    finally:
        arena.close()


def test_timestamps_increase_and_submit_counts(device):
    n = 4096
    x = device.buffer(n * 4, host_visible=True, name="x")
    y = device.buffer(n * 4, host_visible=True, name="y")
    pool = device.descriptor_pool(1, 2)
    ts = device.timestamp_pool(3)
    cmd = device.command_buffer()
    try:
        x.write(np.ones(n, np.float32))
        pipe = device.pipeline(TEST_SCALE, spec=(WG, 2.0, 0.0), n_bindings=2, push_size=4)
        dset = pool.allocate(pipe)
        write_descriptor_set(device, dset, [(x, 0, n * 4), (y, 0, n * 4)])
        before = device.counters.snapshot()
        cmd.begin(one_time=False)  # submitted twice below
        ts.reset_cmd(cmd)
        cmd.timestamp(ts, 0)
        cmd.bind(pipe, dset)
        cmd.push(pipe, struct.pack("<I", n))
        cmd.dispatch(n // WG)
        cmd.barrier()
        cmd.timestamp(ts, 1)
        cmd.fill(y, 0, 16, 0)
        cmd.barrier()
        cmd.timestamp(ts, 2)
        cmd.end()
        device.submit([cmd])
        d = device.counters - before
        assert (d.submits, d.dispatches, d.barriers, d.pipeline_binds, d.descriptor_set_binds) == (
            1,
            1,
            2,
            1,
            1,
        )
        assert d.command_buffer_recordings == 1 and d.recorded_commands == 11
        t = ts.read_ns()
        assert t[0] <= t[1] <= t[2] and t[2] > t[0]
        # The same recording resubmitted without waiting, then an explicit wait.
        device.submit([cmd], wait=False)
        device.wait()
        assert (device.counters - before).submits == 2
    finally:
        for obj in (cmd, ts, pool, y, x):
            obj.close()

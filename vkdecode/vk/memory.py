"""Buffers, memory-type choice, staged uploads in bounded chunks, and an arena with fixed offsets."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from vkdecode.errors import DeviceMemoryError, VulkanError
from vkdecode.vk.ffi import NULL, check, ffi, lib, new, result_name, vk

DEVICE_LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT if vk else 1
HOST_VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT if vk else 2
HOST_COHERENT = vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT if vk else 4
HOST_CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT if vk else 8
# Vulkan 1.2's buffer device address bits (the vulkan package, 1.3.275, lacks the names)
SHADER_DEVICE_ADDRESS, ALLOCATE_DEVICE_ADDRESS = 0x20000, 0x2
USAGE = (
    (
        vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
        | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
        | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        | vk.VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT
    )
    if vk
    else 0
)


_U32_PACKERS: dict[int, struct.Struct] = {}


def format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"


def memory_preferences(host_visible: bool, readback: bool) -> list[int]:
    """Property sets to try, best first. Every list ends in a set all drivers have."""
    if readback:  # CPU reads: cached memory avoids uncached reads over PCIe BAR
        return [HOST_VISIBLE | HOST_COHERENT | HOST_CACHED, HOST_VISIBLE | HOST_COHERENT]
    if host_visible:  # the step buffer: host writes, GPU reads; BAR / unified memory is best
        return [HOST_VISIBLE | HOST_COHERENT | DEVICE_LOCAL, HOST_VISIBLE | HOST_COHERENT]
    return [DEVICE_LOCAL, 0]


def find_memory_types(memory_types: list[tuple[int, int]], type_bits: int, prefs: list[int]) -> list[int]:
    """Memory type indices allowed by type_bits, ordered by the first preference each satisfies."""
    out = []
    for want in prefs:
        for i, (flags, _heap) in enumerate(memory_types):
            if type_bits & (1 << i) and flags & want == want and i not in out:
                out.append(i)
    return out


def check_binding_range(device, nbytes: int) -> None:
    limit = device.info.limits["max_storage_buffer_range"]
    if nbytes > limit:
        raise VulkanError(
            f"a storage-buffer binding of {nbytes} bytes exceeds maxStorageBufferRange ({limit} bytes) on "
            f"{device.info.name}; split the tensor across bindings (vkdecode.vk.memory.split_ranges)"
        )


def split_ranges(nbytes: int, max_range: int, align: int = 256) -> list[tuple[int, int]]:
    """(offset, size) pieces of at most max_range bytes, each offset a multiple of align."""
    step = max(align, (max_range // align) * align)
    return [(o, min(step, nbytes - o)) for o in range(0, nbytes, step)] or [(0, 0)]


class Buffer:
    """A VkBuffer with its own VkDeviceMemory; host-visible memory stays mapped for its lifetime."""

    def __init__(self, device, size: int, host_visible: bool = False, name: str = "", readback: bool = False):
        if size <= 0:
            raise VulkanError(f"buffer {name!r}: size must be positive, got {size}")
        self.device, self.size, self.name = device, int(size), name
        self.handle = self.memory = None
        self._ptr = None
        device._register(self)
        try:
            # coop2 (VKDECODE_COOP2=1 only): its decode functions address buffers by device address
            bda = device.info.features.get("coop2", False)
            usage = USAGE | (SHADER_DEVICE_ADDRESS if bda else 0)
            info = new(
                "VkBufferCreateInfo*",
                {"size": self.size, "usage": usage, "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE},
            )
            out = ffi.new("VkBuffer*")
            check(f"vkCreateBuffer({name or size})", lib.vkCreateBuffer(device.handle, info, NULL, out))
            self.handle = out[0]
            req = ffi.new("VkMemoryRequirements*")
            lib.vkGetBufferMemoryRequirements(device.handle, self.handle, req)
            prefs = memory_preferences(host_visible, readback)
            candidates = find_memory_types(device.memory_types, req.memoryTypeBits, prefs)
            mem = ffi.new("VkDeviceMemory*")
            res = vk.VK_ERROR_OUT_OF_DEVICE_MEMORY
            for t in candidates:  # a small BAR heap (or VRAM) can run out: fall back to the next type
                alloc = new("VkMemoryAllocateInfo*", {"allocationSize": req.size, "memoryTypeIndex": t})
                if bda:
                    flags = new("VkMemoryAllocateFlagsInfo*", {"flags": ALLOCATE_DEVICE_ADDRESS})
                    alloc.pNext = flags
                res = lib.vkAllocateMemory(device.handle, alloc, NULL, mem)
                if res == vk.VK_SUCCESS:
                    self.memory_type = t
                    break
            if res in (vk.VK_ERROR_OUT_OF_DEVICE_MEMORY, vk.VK_ERROR_OUT_OF_HOST_MEMORY):
                raise DeviceMemoryError(
                    f"out of device memory: vkAllocateMemory of {format_bytes(req.size)} ({req.size} bytes) "
                    f"for {name or 'a buffer'} failed with {result_name(res)}; {format_bytes(device.allocated_bytes)} "
                    f"already allocated, {format_bytes(device.info.device_local_bytes)} device-local on "
                    f"{device.info.name}"
                )
            check(f"vkAllocateMemory({req.size} bytes for {name or 'buffer'})", res)
            self.memory = mem[0]
            self.nbytes = int(req.size)
            device.allocated_bytes += self.nbytes  # the live-allocation counter leak tests read
            check("vkBindBufferMemory", lib.vkBindBufferMemory(device.handle, self.handle, self.memory, 0))
            flags = device.memory_types[self.memory_type][0]
            self.host_visible = bool(flags & HOST_VISIBLE) and (host_visible or readback)
            if self.host_visible:
                pp = ffi.new("void**")
                check("vkMapMemory", lib.vkMapMemory(device.handle, self.memory, 0, self.size, 0, pp))
                self._ptr = ffi.cast("char*", pp[0])
                self.mapped = ffi.buffer(self._ptr, self.size)
        except BaseException:
            self.close()
            raise

    @property
    def address(self) -> int:
        """Host address of the persistent mapping (0 when not mapped)."""
        return int(ffi.cast("uintptr_t", self._ptr)) if self._ptr is not None else 0

    def write_u32(self, offset_words: int, values) -> None:
        """Hot path (the step buffer every token): one cached struct.pack_into into the mapping."""
        packer = _U32_PACKERS.get(len(values))
        if packer is None:
            packer = _U32_PACKERS[len(values)] = struct.Struct(f"<{len(values)}I")
        packer.pack_into(self.mapped, offset_words * 4, *values)

    def _check(self, offset: int, nbytes: int) -> None:
        if offset < 0 or offset + nbytes > self.size:
            raise VulkanError(
                f"buffer {self.name!r}: range [{offset}, {offset + nbytes}) outside {self.size} bytes"
            )

    def write(self, data, offset: int = 0) -> None:
        mv = memoryview(np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data).cast("B")
        self._check(offset, mv.nbytes)
        if self.host_visible:
            ffi.memmove(self._ptr + offset, mv, mv.nbytes)
        else:
            self.device_upload(mv, offset)

    def read(self, nbytes: int | None = None, offset: int = 0) -> bytes:
        nbytes = self.size - offset if nbytes is None else nbytes
        self._check(offset, nbytes)
        if self.host_visible:
            return ffi.buffer(self._ptr + offset, nbytes)[:]
        out = bytearray(nbytes)
        self.device_download(memoryview(out), offset)
        return bytes(out)

    def read_array(self, dtype, count: int, offset: int = 0) -> np.ndarray:
        dtype = np.dtype(dtype)
        return np.frombuffer(self.read(count * dtype.itemsize, offset), dtype=dtype).copy()

    # Device-local memory: through the device's reused staging buffer, one chunk at a time.
    def device_upload(self, mv: memoryview, offset: int) -> None:
        staging, cmd = _transfer(self.device)
        for pos in range(0, mv.nbytes, staging.size):
            n = min(staging.size, mv.nbytes - pos)
            ffi.memmove(staging._ptr, mv[pos : pos + n], n)
            cmd.begin()
            cmd.copy(staging, self, n, 0, offset + pos)
            cmd.barrier()  # the copy before any later command (recorded steps barrier compute only)
            cmd.end()
            self.device.submit([cmd])

    def device_download(self, mv: memoryview, offset: int) -> None:
        staging, cmd = _transfer(self.device)
        for pos in range(0, mv.nbytes, staging.size):
            n = min(staging.size, mv.nbytes - pos)
            cmd.begin()
            cmd.barrier()  # earlier shader writes before the copy reads them
            cmd.copy(self, staging, n, offset + pos, 0)
            cmd.host_barrier()
            cmd.end()
            self.device.submit([cmd])
            mv[pos : pos + n] = ffi.buffer(staging._ptr, n)

    def close(self) -> None:
        dev = self.device
        if dev is None:
            return
        if self._ptr is not None:
            self.mapped = None
            lib.vkUnmapMemory(dev.handle, self.memory)
            self._ptr = None
        if self.handle is not None:
            lib.vkDestroyBuffer(dev.handle, self.handle, NULL)
            self.handle = None
        if self.memory is not None:
            lib.vkFreeMemory(dev.handle, self.memory, NULL)
            self.memory = None
            dev.allocated_bytes -= self.nbytes
        dev._unregister(self)
        self.device = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        kind = "host-visible" if getattr(self, "host_visible", False) else "device-local"
        return f"<Buffer {self.name!r} {self.size} bytes {kind}>"


def _transfer(device):
    if device._transfer is None or device._transfer[0].handle is None:
        from vkdecode.vk.commands import CommandBuffer

        device._transfer = (
            Buffer(device, device.staging_chunk, host_visible=True, name="staging"),
            CommandBuffer(device),
        )
    return device._transfer


@dataclass
class Slice:
    buffer: Buffer
    offset: int
    size: int
    name: str = ""

    def write(self, data, offset: int = 0) -> None:
        n = memoryview(data).nbytes if not isinstance(data, np.ndarray) else data.nbytes
        if offset + n > self.size:
            raise VulkanError(f"slice {self.name!r}: write of {n} bytes at {offset} exceeds {self.size}")
        self.buffer.write(data, self.offset + offset)

    def read(self, nbytes: int | None = None, offset: int = 0) -> bytes:
        return self.buffer.read(self.size - offset if nbytes is None else nbytes, self.offset + offset)

    def read_array(self, dtype, count: int, offset: int = 0) -> np.ndarray:
        return self.buffer.read_array(dtype, count, self.offset + offset)

    @property
    def range(self) -> tuple[Buffer, int, int]:
        """(buffer, offset, size) as write_descriptor_set takes it."""
        return (self.buffer, self.offset, self.size)


TAIL_CHUNK = 4 << 20  # chunk size once an arena's expect()ed bytes are used up


class Arena:
    """Bump allocator over a few large buffers; slices never move, so descriptors stay valid."""

    def __init__(self, device, chunk_size: int, host_visible: bool = False):
        self.device = device
        lim = device.info.limits
        self.chunk_size = min(int(chunk_size), lim["max_memory_allocation_size"])
        self.host_visible = host_visible
        self.align = max(16, lim["min_storage_buffer_offset_alignment"])
        self.buffers: list[Buffer] = []
        self._used = 0  # bytes used in the last shared chunk
        self._current: Buffer | None = None
        self.slices: list[Slice] = []
        self._left: int | None = None  # bytes still to come (expect()); None: unknown

    def padded(self, nbytes: int) -> int:
        return -(-max(int(nbytes), 1) // self.align) * self.align

    def expect(self, nbytes: int) -> None:
        """The allocations to come add up to nbytes (each padded()): a new chunk is then no larger
        than what is left, so the last chunk fits its tensors instead of a whole chunk_size (a
        374 MiB model took 512 MiB in 256 MiB chunks)."""
        self._left = int(nbytes)

    def alloc(self, nbytes: int, name: str = "") -> Slice:
        nbytes = max(int(nbytes), 1)
        padded = self.padded(nbytes)
        if padded > self.chunk_size:  # oversized tensor: its own buffer
            buf = Buffer(self.device, padded, self.host_visible, name=name or "arena-large")
            self.buffers.append(buf)
            s = Slice(buf, 0, nbytes, name)
        else:
            if self._current is None or self._used + padded > self._current.size:
                # past what expect() announced (scratch added later): small chunks, not whole ones
                left = self.chunk_size if self._left is None else self._left if self._left > 0 else TAIL_CHUNK
                size = min(self.chunk_size, max(padded, left))
                self._current = Buffer(
                    self.device, size, self.host_visible, name=f"arena-{len(self.buffers)}"
                )
                self.buffers.append(self._current)
                self._used = 0
            s = Slice(self._current, self._used, nbytes, name)
            self._used += padded
        if self._left is not None:
            self._left -= padded
        self.slices.append(s)
        return s

    @property
    def allocated_bytes(self) -> int:
        return sum(b.size for b in self.buffers)

    def close(self) -> None:
        for b in reversed(self.buffers):
            b.close()
        self.buffers.clear()
        self.slices.clear()
        self._current = None

"""Command buffers (record, bind, dispatch, barriers, copies) and timestamp query pools.

vkCmd* go straight to `lib` with structs built once per command buffer: the unfused executor
records hundreds of commands per token, so per-call Python overhead matters.
"""

from __future__ import annotations

from vkdecode.errors import VulkanError
from vkdecode.vk.ffi import NULL, check, ffi, lib, new, vk

COMPUTE = vk.VK_PIPELINE_BIND_POINT_COMPUTE if vk else 1
_STAGES = (vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT) if vk else 0
# DRAW_INDIRECT covers vkCmdDispatchIndirect reading arguments a shader wrote.
_DST_STAGES = (_STAGES | vk.VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT) if vk else 0
_WRITES = (vk.VK_ACCESS_SHADER_WRITE_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT) if vk else 0
_ACCESS = (
    (
        vk.VK_ACCESS_SHADER_READ_BIT
        | vk.VK_ACCESS_SHADER_WRITE_BIT
        | vk.VK_ACCESS_TRANSFER_READ_BIT
        | vk.VK_ACCESS_TRANSFER_WRITE_BIT
        | vk.VK_ACCESS_INDIRECT_COMMAND_READ_BIT
    )
    if vk
    else 0
)


class CommandBuffer:
    """A primary command buffer from the device's pool (which allows per-buffer reset)."""

    def __init__(self, device):
        self.device = device
        self.handle = None
        self.recording = False
        device._register(self)
        info = new(
            "VkCommandBufferAllocateInfo*",
            {
                "commandPool": device.command_pool,
                "commandBufferCount": 1,
                "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY,
            },
        )
        out = ffi.new("VkCommandBuffer*")
        try:
            check("vkAllocateCommandBuffers", lib.vkAllocateCommandBuffers(device.handle, info, out))
        except BaseException:
            self.close()
            raise
        self.handle = out[0]
        self._begin = new("VkCommandBufferBeginInfo*")
        self._dset = ffi.new("VkDescriptorSet[1]")
        # Global barrier: compute/transfer writes -> later compute/transfer reads and writes (RAW + WAW).
        self._mb = new("VkMemoryBarrier*", {"srcAccessMask": _WRITES, "dstAccessMask": _ACCESS})
        self._cb = new(
            "VkMemoryBarrier*",
            {
                "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT,
                "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT,
            },
        )
        # the same, and the step's indirect dispatch arguments a shader wrote (executors/plan.py GridArgs)
        self._ib = new(
            "VkMemoryBarrier*",
            {
                "srcAccessMask": vk.VK_ACCESS_SHADER_WRITE_BIT,
                "dstAccessMask": vk.VK_ACCESS_SHADER_READ_BIT
                | vk.VK_ACCESS_SHADER_WRITE_BIT
                | vk.VK_ACCESS_INDIRECT_COMMAND_READ_BIT,
            },
        )
        self._hb = new(
            "VkMemoryBarrier*", {"srcAccessMask": _WRITES, "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT}
        )
        self._region = ffi.new("VkBufferCopy*")

    def begin(self, one_time: bool = True, simultaneous: bool = False) -> None:
        """Start recording; one_time=False for a buffer replayed every token."""
        flags = vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT if one_time else 0
        if simultaneous:  # resubmitted while a previous submit may still be pending
            flags |= vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
        self._begin.flags = flags
        check("vkBeginCommandBuffer", lib.vkBeginCommandBuffer(self.handle, self._begin))
        self.recording = True
        self.device.counters.command_buffer_recordings += 1

    def end(self) -> None:
        check("vkEndCommandBuffer", lib.vkEndCommandBuffer(self.handle))
        self.recording = False

    def reset(self) -> None:
        check("vkResetCommandBuffer", lib.vkResetCommandBuffer(self.handle, 0))
        self.recording = False

    def bind(self, pipeline, dset) -> None:
        c = self.device.counters
        lib.vkCmdBindPipeline(self.handle, COMPUTE, pipeline.handle)
        self._dset[0] = dset
        lib.vkCmdBindDescriptorSets(self.handle, COMPUTE, pipeline.layout, 0, 1, self._dset, 0, NULL)
        c.pipeline_binds += 1
        c.descriptor_set_binds += 1
        c.recorded_commands += 2

    def bind_pipeline(self, pipeline) -> None:
        lib.vkCmdBindPipeline(self.handle, COMPUTE, pipeline.handle)
        self.device.counters.pipeline_binds += 1
        self.device.counters.recorded_commands += 1

    def bind_set(self, pipeline, dset) -> None:
        self._dset[0] = dset
        lib.vkCmdBindDescriptorSets(self.handle, COMPUTE, pipeline.layout, 0, 1, self._dset, 0, NULL)
        self.device.counters.descriptor_set_binds += 1
        self.device.counters.recorded_commands += 1

    def push(self, pipeline, data: bytes) -> None:
        if len(data) > pipeline.push_size:
            raise VulkanError(
                f"push of {len(data)} bytes exceeds the pipeline's push_size {pipeline.push_size}"
            )
        lib.vkCmdPushConstants(
            self.handle, pipeline.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, len(data), ffi.from_buffer(data)
        )
        self.device.counters.recorded_commands += 1

    def dispatch(self, x: int, y: int = 1, z: int = 1) -> None:
        lib.vkCmdDispatch(self.handle, x, y, z)
        self.device.counters.dispatches += 1
        self.device.counters.recorded_commands += 1

    def dispatch_indirect(self, buf, offset: int) -> None:
        """Group counts read at run time from buf (a Buffer) at byte offset (3 u32)."""
        lib.vkCmdDispatchIndirect(self.handle, buf.handle, offset)
        self.device.counters.dispatches += 1
        self.device.counters.recorded_commands += 1

    def compute_barrier(self, indirect: bool = False) -> None:
        """Compute writes -> compute reads/writes only: the barrier inside a decode step. Narrower
        stages and access than barrier(), so the driver has less to wait for and flush. indirect:
        also -> the indirect argument reads of later vkCmdDispatchIndirect."""
        dst = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | (
            vk.VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT if indirect else 0
        )
        lib.vkCmdPipelineBarrier(
            self.handle,
            vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
            dst,
            0,
            1,
            self._ib if indirect else self._cb,
            0,
            NULL,
            0,
            NULL,
        )
        self.device.counters.barriers += 1
        self.device.counters.recorded_commands += 1

    def barrier(self) -> None:
        lib.vkCmdPipelineBarrier(self.handle, _STAGES, _DST_STAGES, 0, 1, self._mb, 0, NULL, 0, NULL)
        self.device.counters.barriers += 1
        self.device.counters.recorded_commands += 1

    def host_barrier(self) -> None:
        """Make compute/transfer writes visible to host reads after the fence (readback buffers)."""
        lib.vkCmdPipelineBarrier(
            self.handle, _STAGES, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, self._hb, 0, NULL, 0, NULL
        )
        self.device.counters.barriers += 1
        self.device.counters.recorded_commands += 1

    def copy(self, src, dst, size: int, src_offset: int = 0, dst_offset: int = 0) -> None:
        r = self._region
        r.srcOffset, r.dstOffset, r.size = src_offset, dst_offset, size
        lib.vkCmdCopyBuffer(self.handle, src.handle, dst.handle, 1, r)
        self.device.counters.recorded_commands += 1

    def fill(self, buf, offset: int, size: int, value: int = 0) -> None:
        """vkCmdFillBuffer: offset and size must be multiples of 4."""
        if offset % 4 or size % 4:
            raise VulkanError(f"fill offset {offset} and size {size} must be multiples of 4")
        lib.vkCmdFillBuffer(self.handle, buf.handle, offset, size, value & 0xFFFFFFFF)
        self.device.counters.recorded_commands += 1

    def timestamp(self, pool, index: int) -> None:
        lib.vkCmdWriteTimestamp(self.handle, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool.handle, index)
        self.device.counters.recorded_commands += 1

    def close(self) -> None:
        dev = self.device
        if dev is None:
            return
        if self.handle is not None and dev.command_pool is not None:
            arr = ffi.new("VkCommandBuffer[1]", [self.handle])
            lib.vkFreeCommandBuffers(dev.handle, dev.command_pool, 1, arr)
        self.handle = None
        dev._unregister(self)
        self.device = None


class TimestampPool:
    """count timestamp queries; read_ns() converts ticks to nanoseconds with timestampPeriod."""

    def __init__(self, device, count: int):
        if not device.info.features.get("timestamps"):
            raise VulkanError(f"{device.info.name} does not support timestamps on its compute queue")
        self.device, self.count = device, count
        self.handle = None
        device._register(self)
        info = new("VkQueryPoolCreateInfo*", {"queryType": vk.VK_QUERY_TYPE_TIMESTAMP, "queryCount": count})
        out = ffi.new("VkQueryPool*")
        try:
            check("vkCreateQueryPool", lib.vkCreateQueryPool(device.handle, info, NULL, out))
        except BaseException:
            self.close()
            raise
        self.handle = out[0]
        self._data = ffi.new("uint64_t[]", count)
        bits = device.info.limits.get("timestamp_valid_bits", 64)
        self._mask = (1 << bits) - 1 if bits < 64 else (1 << 64) - 1
        self.period = device.info.limits["timestamp_period"]

    def reset_cmd(self, cmd) -> None:
        lib.vkCmdResetQueryPool(cmd.handle, self.handle, 0, self.count)
        self.device.counters.recorded_commands += 1

    def read_ns(self, first: int = 0, count: int | None = None) -> list[float]:
        count = self.count - first if count is None else count
        flags = vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT
        check(
            "vkGetQueryPoolResults",
            lib.vkGetQueryPoolResults(
                self.device.handle, self.handle, first, count, 8 * count, self._data, 8, flags
            ),
        )
        return [(self._data[i] & self._mask) * self.period for i in range(count)]

    def close(self) -> None:
        dev = self.device
        if dev is None:
            return
        if self.handle is not None:
            lib.vkDestroyQueryPool(dev.handle, self.handle, NULL)
            self.handle = None
        dev._unregister(self)
        self.device = None

"""Descriptor pools, set allocation, and buffer-range writes (one vkUpdateDescriptorSets per set)."""

from __future__ import annotations

from vkdecode.errors import VulkanError
from vkdecode.vk.ffi import NULL, check, ffi, lib, new, vk
from vkdecode.vk.memory import Slice, check_binding_range


class DescriptorPool:
    """Storage-buffer descriptors only; sets are freed all at once by reset() (no per-set free)."""

    def __init__(self, device, max_sets: int, max_descriptors: int):
        self.device, self.max_sets, self.max_descriptors = device, max_sets, max_descriptors
        self.handle = None
        self.live_sets = 0
        device._register(self)
        try:
            size = ffi.new(
                "VkDescriptorPoolSize*",
                {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": max(max_descriptors, 1)},
            )
            info = new(
                "VkDescriptorPoolCreateInfo*", {"maxSets": max_sets, "poolSizeCount": 1, "pPoolSizes": size}
            )
            out = ffi.new("VkDescriptorPool*")
            check("vkCreateDescriptorPool", lib.vkCreateDescriptorPool(device.handle, info, NULL, out))
            self.handle = out[0]
            self._layouts = ffi.new("VkDescriptorSetLayout[1]")
            self._alloc = new(
                "VkDescriptorSetAllocateInfo*",
                {"descriptorPool": self.handle, "descriptorSetCount": 1, "pSetLayouts": self._layouts},
            )
        except BaseException:
            self.close()
            raise

    def allocate(self, pipeline):
        """One VkDescriptorSet for pipeline's set-0 layout."""
        if self.handle is None:
            raise VulkanError("descriptor pool is closed")
        self._layouts[0] = pipeline.set_layout
        out = ffi.new("VkDescriptorSet*")
        res = lib.vkAllocateDescriptorSets(self.device.handle, self._alloc, out)
        if res in (vk.VK_ERROR_OUT_OF_POOL_MEMORY, vk.VK_ERROR_FRAGMENTED_POOL):
            raise VulkanError(
                f"vkAllocateDescriptorSets: pool exhausted ({self.live_sets}/{self.max_sets} sets, "
                f"{self.max_descriptors} descriptors); size the pool larger"
            )
        check("vkAllocateDescriptorSets", res)
        self.device.counters.descriptor_set_allocations += 1
        self.live_sets += 1
        return out[0]

    def reset(self) -> None:
        if self.handle is not None:
            check("vkResetDescriptorPool", lib.vkResetDescriptorPool(self.device.handle, self.handle, 0))
        self.live_sets = 0

    def close(self) -> None:
        dev = self.device
        if dev is None:
            return
        if self.handle is not None:
            lib.vkDestroyDescriptorPool(dev.handle, self.handle, NULL)
            self.handle = None
        self.live_sets = 0
        dev._unregister(self)
        self.device = None


def write_descriptor_set(device, dset, ranges: list) -> None:
    """Bind ranges[i] = (Buffer, offset, size) or a Slice to binding i, in one vkUpdateDescriptorSets."""
    n = len(ranges)
    infos = ffi.new("VkDescriptorBufferInfo[]", max(n, 1))
    writes = ffi.new("VkWriteDescriptorSet[]", max(n, 1))
    align = device.info.limits["min_storage_buffer_offset_alignment"]
    for i, r in enumerate(ranges):
        buf, offset, size = r.range if isinstance(r, Slice) else r
        if buf.handle is None:
            raise VulkanError(f"binding {i}: buffer {buf.name!r} is closed")
        check_binding_range(device, size)
        if offset % align or offset + size > buf.size or size <= 0:
            raise VulkanError(
                f"binding {i}: range offset={offset} size={size} of buffer {buf.name!r} "
                f"({buf.size} bytes) is out of bounds or not aligned to {align}"
            )
        infos[i].buffer, infos[i].offset, infos[i].range = buf.handle, offset, size
        w = writes[i]
        w.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
        w.dstSet, w.dstBinding, w.descriptorCount = dset, i, 1
        w.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
        w.pBufferInfo = infos + i
    lib.vkUpdateDescriptorSets(device.handle, n, writes, 0, NULL)
    device.counters.descriptor_writes += n

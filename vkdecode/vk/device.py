"""Vulkan instance, physical-device probing and choice, and the Device that owns everything else."""

from __future__ import annotations

import os

from vkdecode.errors import NoDeviceError, VulkanError
from vkdecode.stats import Counters
from vkdecode.vk import instance as _inst
from vkdecode.vk.ffi import NULL, check, ffi, lib, new, vk, wrap_exc
from vkdecode.vk.info import VENDORS, DeviceInfo

TYPE_RANK = {"discrete": 0, "integrated": 1, "virtual": 2, "cpu": 3, "other": 4}


def _env_validate(validate: bool | None) -> bool:
    if validate is None:
        return os.environ.get("VKDECODE_VALIDATE", "") not in ("", "0")
    return bool(validate)


def enumerate_devices(validate: bool | None = None) -> list[DeviceInfo]:
    """Probe every physical device through a short-lived instance."""
    inst = _inst.Instance(_env_validate(validate))
    try:
        return [p.info for p in inst.probes]
    finally:
        inst.close()


def choose_device(infos: list[DeviceInfo], selector: str | int | None = None) -> DeviceInfo:
    """Pure choice: explicit selector (index or name substring), else VKDECODE_DEVICE, else the best type."""
    if not infos:
        raise NoDeviceError("no Vulkan device found")
    if selector is None or selector == "":
        selector = os.environ.get("VKDECODE_DEVICE") or None
    if selector is None:
        return min(infos, key=lambda d: (TYPE_RANK.get(d.device_type, 9), d.index))
    listing = "; ".join(f"{d.index}: {d.name}" for d in infos)
    if isinstance(selector, int) or str(selector).strip().isdigit():
        idx = int(selector)
        for d in infos:
            if d.index == idx:
                return d
        raise NoDeviceError(f"no Vulkan device with index {idx} (devices: {listing})")
    hits = [d for d in infos if str(selector).lower() in d.name.lower()]
    if not hits:
        raise NoDeviceError(f"no Vulkan device matches {selector!r} (devices: {listing})")
    return min(hits, key=lambda d: (TYPE_RANK.get(d.device_type, 9), d.index))


class Device:
    """Owns the instance, one VkDevice, one compute queue, and every wrapper created through it."""

    def __init__(self, selector=None, validate: bool | None = None):
        self.counters = Counters()
        self.allocated_bytes = 0  # VkDeviceMemory alive (memory.Buffer keeps it)
        self._children: dict[int, object] = {}  # insertion-ordered: reverse order at close
        self._pipelines: dict[tuple, object] = {}
        self._closed = False
        self.handle = None
        self._fences: list = []
        self._pending: list = []
        self._submit_cache: dict[tuple, tuple] = {}
        self._transfer = None  # (staging Buffer, CommandBuffer), created on first use
        self.staging_chunk = 16 << 20
        self._inst = _inst.Instance(_env_validate(validate))
        try:
            probes = {p.info.index: p for p in self._inst.probes}
            info = choose_device([p.info for p in self._inst.probes], selector)
            self._probe = probes[info.index]
            self.physical = self._probe.physical
            self.handle, self.queue_family = _inst.create_logical_device(self._probe)
            self.info = self._probe.info
            q = ffi.new("VkQueue*")
            lib.vkGetDeviceQueue(self.handle, self.queue_family, 0, q)
            self.queue = q[0]
            self.memory_types = self._probe.memory_types
            self.limits = self.info.limits
            pool_info = new(
                "VkCommandPoolCreateInfo*",
                {
                    "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                    "queueFamilyIndex": self.queue_family,
                },
            )
            p = ffi.new("VkCommandPool*")
            check("vkCreateCommandPool", lib.vkCreateCommandPool(self.handle, pool_info, NULL, p))
            self.command_pool = p[0]
            from vkdecode.vk.shaders import open_pipeline_cache

            self.pipeline_cache, self._pipeline_cache_path = open_pipeline_cache(self)
        except BaseException:
            self.close()
            raise

    # ---- validation -------------------------------------------------------------------------
    @property
    def validation_errors(self) -> list[str]:
        return self._inst.messages

    def check_validation(self) -> None:
        msgs = list(self._inst.messages)
        self._inst.messages.clear()
        if msgs:
            raise VulkanError(f"{len(msgs)} Vulkan validation error(s):\n" + "\n".join(msgs))

    # ---- ownership ----------------------------------------------------------------------------
    def _register(self, obj) -> None:
        if self._closed:
            raise VulkanError("device is closed")
        self._children[id(obj)] = obj

    def _unregister(self, obj) -> None:
        self._children.pop(id(obj), None)

    def live_objects(self) -> dict[str, int]:
        """Live wrappers by type; the staging buffer and its command buffer (internal, reused) are left out."""
        counts: dict[str, int] = {}
        internal = self._transfer or ()
        for obj in self._children.values():
            if any(obj is o for o in internal):
                continue
            name = type(obj).__name__
            counts[name] = counts.get(name, 0) + 1
            if name == "DescriptorPool":
                counts["DescriptorSet"] = counts.get("DescriptorSet", 0) + obj.live_sets
        return counts

    # ---- factories ------------------------------------------------------------------------------
    def buffer(self, size: int, host_visible: bool = False, name: str = "", readback: bool = False):
        from vkdecode.vk.memory import Buffer

        return Buffer(self, size, host_visible=host_visible, name=name, readback=readback)

    def arena(self, chunk_size: int, host_visible: bool = False):
        from vkdecode.vk.memory import Arena

        return Arena(self, chunk_size, host_visible=host_visible)

    def pipeline(
        self,
        shader: str,
        spec: tuple = (),
        defines: dict | None = None,
        n_bindings: int = 1,
        push_size: int = 0,
    ):
        key = (shader, tuple(spec), tuple(sorted((defines or {}).items())), n_bindings, push_size)
        pipe = self._pipelines.get(key)
        if pipe is None or pipe.handle is None:
            from vkdecode.vk.shaders import Pipeline

            pipe = self._pipelines[key] = Pipeline(
                self, shader, tuple(spec), defines, n_bindings, push_size, key=key
            )
        return pipe

    def release_pipelines(self) -> int:
        """Destroy every cached pipeline; the next pipeline() call builds afresh (from the on-disk
        SPIR-V and pipeline caches). Only while no executor of this device is open: a process that
        loads and closes many models (the test suite) gets the driver's compiled code back."""
        pipes = list(self._pipelines.values())
        for pipe in pipes:
            pipe.close()
        return len(pipes)

    def descriptor_pool(self, max_sets: int, max_descriptors: int):
        from vkdecode.vk.descriptors import DescriptorPool

        return DescriptorPool(self, max_sets, max_descriptors)

    def command_buffer(self):
        from vkdecode.vk.commands import CommandBuffer

        return CommandBuffer(self)

    def timestamp_pool(self, count: int):
        from vkdecode.vk.commands import TimestampPool

        return TimestampPool(self, count)

    # ---- submission ---------------------------------------------------------------------------
    def _fence(self):
        if self._fences:
            return self._fences.pop()
        info = new("VkFenceCreateInfo*")
        f = ffi.new("VkFence*")
        check("vkCreateFence", lib.vkCreateFence(self.handle, info, NULL, f))
        return f[0]

    def submit(self, cmds: list, wait: bool = True, timeout_s: float = 30.0) -> None:
        """One vkQueueSubmit with a fence; with wait, block until done or raise (never hang)."""
        key = tuple(id(c) for c in cmds)
        cached = self._submit_cache.get(key)
        if cached is None or any(c.handle is None for c in cmds):
            arr = ffi.new("VkCommandBuffer[]", [c.handle for c in cmds])
            info = new("VkSubmitInfo*", {"commandBufferCount": len(cmds), "pCommandBuffers": arr})
            # A replayed step resubmits the same list every token: keep the SubmitInfo built.
            cached = self._submit_cache[key] = (info, arr, list(cmds))
            if len(self._submit_cache) > 64:
                self._submit_cache.pop(next(iter(self._submit_cache)))
        fence = self._fence()
        res = lib.vkQueueSubmit(self.queue, 1, cached[0], fence)
        self.counters.submits += 1
        if res != vk.VK_SUCCESS:
            self._fences.append(fence)
            check("vkQueueSubmit", res)
        self._pending.append(fence)
        if wait:
            self.wait(timeout_s)
        return fence

    def wait_fence(self, fence, timeout_s: float = 30.0) -> None:
        """Wait for one earlier submit(wait=False) (pipelined replay keeps two in flight)."""
        if fence not in self._pending:
            return
        arr = ffi.new("VkFence[]", [fence])
        res = lib.vkWaitForFences(self.handle, 1, arr, vk.VK_TRUE, int(timeout_s * 1e9))
        if res == vk.VK_TIMEOUT:
            raise VulkanError(
                f"vkWaitForFences: GPU work did not finish within {timeout_s:g} s "
                "(VK_TIMEOUT; a hung or very slow shader)"
            )
        check("vkWaitForFences", res)
        check("vkResetFences", lib.vkResetFences(self.handle, 1, arr))
        self._pending.remove(fence)
        self._fences.append(fence)

    def wait(self, timeout_s: float = 30.0) -> None:
        """Wait for every submit not yet waited on."""
        if not self._pending:
            return
        arr = ffi.new("VkFence[]", self._pending)
        res = lib.vkWaitForFences(self.handle, len(self._pending), arr, vk.VK_TRUE, int(timeout_s * 1e9))
        if res == vk.VK_TIMEOUT:
            raise VulkanError(
                f"vkWaitForFences: GPU work did not finish within {timeout_s:g} s "
                "(VK_TIMEOUT; a hung or very slow shader)"
            )
        check("vkWaitForFences", res)
        check("vkResetFences", lib.vkResetFences(self.handle, len(self._pending), arr))
        self._fences.extend(self._pending)
        self._pending.clear()

    def copy_regions(self, copies) -> None:
        """Device-to-device copies (src, dst, size, src_offset, dst_offset), submitted and waited
        for, between barriers: shader writes earlier on the queue land first, and the next
        dispatch sees the copies (a batch slot's KV rows, a recurrent state checkpoint)."""
        cmd = self.command_buffer()
        try:
            cmd.begin()
            cmd.barrier()
            for src, dst, size, src_offset, dst_offset in copies:
                cmd.copy(src, dst, size, src_offset, dst_offset)
            cmd.barrier()
            cmd.end()
            self.submit([cmd])
        finally:
            cmd.close()

    def wait_idle(self) -> None:
        if self.handle is not None:
            self.wait()
            check("vkDeviceWaitIdle", lib.vkDeviceWaitIdle(self.handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.handle is not None:
            lib.vkDeviceWaitIdle(self.handle)  # result ignored: a lost device must still release its objects
            for obj in reversed(list(self._children.values())):
                obj.close()
            self._children.clear()
            self._pipelines.clear()
            self._submit_cache.clear()
            for f in self._fences + self._pending:
                lib.vkDestroyFence(self.handle, f, NULL)
            self._fences, self._pending = [], []
            if getattr(self, "pipeline_cache", None) is not None:
                from vkdecode.vk.shaders import save_pipeline_cache

                save_pipeline_cache(self)
                lib.vkDestroyPipelineCache(self.handle, self.pipeline_cache, NULL)
                self.pipeline_cache = None
            if getattr(self, "command_pool", None) is not None:
                lib.vkDestroyCommandPool(self.handle, self.command_pool, NULL)
                self.command_pool = None
            lib.vkDestroyDevice(self.handle, NULL)
            self.handle = None
        self._inst.close()

    def __repr__(self) -> str:
        return f"<Device {getattr(self, 'info', None) and self.info.name!r}>"


__all__ = ["VENDORS", "Device", "DeviceInfo", "choose_device", "enumerate_devices", "wrap_exc"]

"""Thin, explicit wrappers over the `vulkan` cffi package (see DESIGN.md, "vk/")."""
from vkdecode.vk.device import Device, DeviceInfo, choose_device, enumerate_devices
from vkdecode.vk.memory import Arena, Buffer, Slice, check_binding_range, split_ranges
from vkdecode.vk.shaders import Pipeline, compile_shader, compiler_invocations, shader_dir
from vkdecode.vk.descriptors import DescriptorPool, write_descriptor_set
from vkdecode.vk.commands import CommandBuffer, TimestampPool

__all__ = ["Device", "DeviceInfo", "choose_device", "enumerate_devices", "Arena", "Buffer", "Slice",
           "check_binding_range", "split_ranges", "Pipeline", "compile_shader", "compiler_invocations",
           "shader_dir", "DescriptorPool", "write_descriptor_set", "CommandBuffer", "TimestampPool"]

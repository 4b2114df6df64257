"""Thin, explicit wrappers over the `vulkan` cffi package (see DESIGN.md, "vk/")."""

from vkdecode.vk.commands import CommandBuffer, TimestampPool
from vkdecode.vk.descriptors import DescriptorPool, write_descriptor_set
from vkdecode.vk.device import Device, DeviceInfo, choose_device, enumerate_devices
from vkdecode.vk.memory import Arena, Buffer, Slice, check_binding_range, split_ranges
from vkdecode.vk.shaders import Pipeline, compile_shader, compiler_invocations, shader_dir

__all__ = [
    "Arena",
    "Buffer",
    "CommandBuffer",
    "DescriptorPool",
    "Device",
    "DeviceInfo",
    "Pipeline",
    "Slice",
    "TimestampPool",
    "check_binding_range",
    "choose_device",
    "compile_shader",
    "compiler_invocations",
    "enumerate_devices",
    "shader_dir",
    "split_ranges",
    "write_descriptor_set",
]

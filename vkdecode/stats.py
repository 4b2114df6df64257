"""Counters every executor fills. The vk wrappers count at the Vulkan call sites, so the numbers
are what was actually called, not what an executor believes it did."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass
class Counters:
    dispatches: int = 0
    pipeline_binds: int = 0
    descriptor_set_binds: int = 0
    descriptor_writes: int = 0          # VkWriteDescriptorSet entries passed to vkUpdateDescriptorSets
    descriptor_set_allocations: int = 0
    command_buffer_recordings: int = 0  # vkBeginCommandBuffer calls
    recorded_commands: int = 0          # every vkCmd* call
    barriers: int = 0
    submits: int = 0

    def snapshot(self) -> Counters:
        return Counters(**asdict(self))

    def __sub__(self, other: Counters) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def as_dict(self) -> dict:
        return asdict(self)

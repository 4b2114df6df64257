"""What a physical device is, as the probe (probe.py) reports it and choose_device reads it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

VENDORS = {
    0x1002: "AMD",
    0x8086: "Intel",
    0x10DE: "NVIDIA",
    0x106B: "Apple",
    0x13B5: "ARM",
    0x5143: "Qualcomm",
    0x10005: "Mesa",
}


@dataclass
class DeviceInfo:
    index: int
    name: str
    vendor: str
    vendor_id: int
    device_id: int
    device_type: str
    driver_name: str = ""
    driver_info: str = ""
    driver_version: str = ""
    api_version: str = ""
    limits: dict = field(default_factory=dict)
    features: dict = field(default_factory=dict)
    memory_heaps: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def device_local_bytes(self) -> int:
        return sum(h["size"] for h in self.memory_heaps if h["device_local"])

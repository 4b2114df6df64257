"""vk/pipeline_stats.py: the driver's statistics as the benches read them."""

from __future__ import annotations

from vkdecode.vk.pipeline_stats import local_memory_bytes, stats_summary


def test_local_memory_from_the_drivers_statistics():
    """NVIDIA's count sits in the low 32 bits (the high ones held 2^36 on every pipeline seen);
    no statistics (lavapipe, or VKDECODE_PIPELINE_STATS unset) reads as none."""
    nv = {"Register Count": 184, "Local Memory Size": (1 << 36) + 480}
    assert local_memory_bytes(nv) == 480
    assert local_memory_bytes({"Local Memory Size": 1 << 36}) == 0
    assert local_memory_bytes({}) == 0
    assert stats_summary(nv) == "regs 184 local 480 B"
    assert stats_summary({"Register Count": 89, "Local Memory Size": 1 << 36}) == "regs 89"
    assert stats_summary({}) == "-"

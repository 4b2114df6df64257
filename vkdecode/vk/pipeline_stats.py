"""The driver's statistics of a compiled pipeline (VK_KHR_pipeline_executable_properties, asked for
with VKDECODE_PIPELINE_STATS=1: vk/probe.py), and how the benches summarise them: registers per
invocation and local memory, why a kernel's occupancy or speed is what it is.
"""

from __future__ import annotations

from vkdecode.vk.ffi import NULL, check, ffi, lib, new, stype, to_str


def executable_stats(device, pipeline) -> dict:
    """{statistic name: value} the driver reports for the pipeline's compute executable (NVIDIA:
    registers per invocation, instructions, ...): why a kernel's occupancy is what it is."""
    fn = ffi.cast(
        "PFN_vkGetPipelineExecutableStatisticsKHR",
        lib.vkGetDeviceProcAddr(device.handle, b"vkGetPipelineExecutableStatisticsKHR"),
    )
    if fn == NULL:
        return {}
    info = new("VkPipelineExecutableInfoKHR*", {"pipeline": pipeline, "executableIndex": 0})
    n = ffi.new("uint32_t*")
    if fn(device.handle, info, n, NULL) != 0 or not n[0]:
        return {}
    st = ffi.new("VkPipelineExecutableStatisticKHR[]", n[0])
    for i in range(n[0]):
        st[i].sType = stype("VkPipelineExecutableStatisticKHR")
    check("vkGetPipelineExecutableStatisticsKHR", fn(device.handle, info, n, st))
    fmt = {0: "b32", 1: "i64", 2: "u64", 3: "f64"}
    return {to_str(st[i].name): getattr(st[i].value, fmt[st[i].format]) for i in range(n[0])}


def local_memory_bytes(stats: dict) -> int:
    """Bytes of local memory (spilled or run-time-indexed arrays) an invocation of the pipeline
    uses, from its driver statistics; 0 where the driver says nothing. NVIDIA's 580 driver puts the
    count in the low 32 bits of a u64 whose high bits held 2^36 for every pipeline seen. A nonzero
    count in a loop-heavy kernel is worth a look: a loop over an array of cooperative matrices the
    driver kept cost 2x (docs/journal.md, 2026-12-07 nineteenth session)."""
    return int(stats.get("Local Memory Size", 0)) & 0xFFFFFFFF


def stats_summary(stats: dict) -> str:
    """'regs R' and, where there is any, 'local N B': the driver's statistics in a bench line."""
    if not stats:
        return "-"
    local = local_memory_bytes(stats)
    return f"regs {stats.get('Register Count', '?')}" + (f" local {local} B" if local else "")

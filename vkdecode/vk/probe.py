"""Physical-device probing: extensions, properties, limits, memory heaps and the optional features
(FEATURE_STRUCTS) of one VkPhysicalDevice, as a Probe whose info is the public DeviceInfo. The same
feature structs enable those features at device creation (instance.create_logical_device).
"""

from __future__ import annotations

import os

from vkdecode.vk import coopmat
from vkdecode.vk.ffi import NULL, check, ffi, lib, new, stype, to_str, version_str, vk
from vkdecode.vk.info import VENDORS, DeviceInfo

TYPES = {0: "other", 1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
SUBGROUP_OPS = ["basic", "vote", "arithmetic", "ballot", "shuffle", "shuffle_relative", "clustered", "quad"]
# (feature struct, core version, extension that provides it before then, {field: features key})
FEATURE_STRUCTS = [
    (
        "VkPhysicalDevice16BitStorageFeatures",
        (1, 1),
        "VK_KHR_16bit_storage",
        {"storageBuffer16BitAccess": "storage_16bit"},
    ),
    (
        "VkPhysicalDevice8BitStorageFeatures",
        (1, 2),
        "VK_KHR_8bit_storage",
        {"storageBuffer8BitAccess": "storage_8bit"},
    ),
    (
        "VkPhysicalDeviceShaderFloat16Int8Features",
        (1, 2),
        "VK_KHR_shader_float16_int8",
        {"shaderFloat16": "float16", "shaderInt8": "int8"},
    ),
    (
        "VkPhysicalDeviceSubgroupSizeControlFeatures",
        (1, 3),
        "VK_EXT_subgroup_size_control",
        {"subgroupSizeControl": "subgroup_size_control", "computeFullSubgroups": "compute_full_subgroups"},
    ),
    # glslang declares the Vulkan memory model in every cooperative-matrix shader
    (
        "VkPhysicalDeviceVulkanMemoryModelFeatures",
        (1, 2),
        "VK_KHR_vulkan_memory_model",
        {"vulkanMemoryModel": "vulkan_memory_model"},
    ),
    # integer dot products (bench/kquant_idot.py's q4_k matvec; core in 1.3)
    (
        "VkPhysicalDeviceShaderIntegerDotProductFeatures",
        (1, 3),
        "VK_KHR_shader_integer_dot_product",
        {"shaderIntegerDotProduct": "integer_dot"},
    ),
    # tensor-core kernels for prompt chunks (shaders/*_coop.comp, vk/coopmat.py); never core, hence 99
    (
        "VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
        (99, 0),
        "VK_KHR_cooperative_matrix",
        {"cooperativeMatrix": "coop_matrix_khr"},
    ),
]
# the driver's statistics of each compiled pipeline (registers, instructions): a diagnostic for
# bench scripts (VKDECODE_PIPELINE_STATS=1, vk/shaders.py), not enabled otherwise
if os.environ.get("VKDECODE_PIPELINE_STATS"):
    FEATURE_STRUCTS.append(
        (
            "VkPhysicalDevicePipelineExecutablePropertiesFeaturesKHR",
            (99, 0),
            "VK_KHR_pipeline_executable_properties",
            {"pipelineExecutableInfo": "pipeline_stats"},
        )
    )


# VK_NV_cooperative_matrix2, only with VKDECODE_COOP2=1 (bench/coop2_probe.py): the vulkan package
# (1.3.275) predates it, so VkPhysicalDeviceCooperativeMatrix2FeaturesNV is laid out by hand as
# u32 words: sType, padding, pNext (2 words), then seven VkBool32 (vulkan_core.h 1.4.309).
COOP2_EXT = "VK_NV_cooperative_matrix2"
COOP2_STYPE = 1000593000
COOP2_WORKGROUP_SCOPE, COOP2_TENSOR_ADDRESSING = 4, 9  # word indices of those two features


class Probe:
    """Everything learnt about one physical device; info is the public DeviceInfo."""

    def _chain_coop2(self):
        """The hand-laid coop2 features struct, chained into features2 (queried, then enabled as
        queried), or None: VKDECODE_COOP2 unset, or the device lacks the extension."""
        if os.environ.get("VKDECODE_COOP2") != "1" or COOP2_EXT not in self.extensions:
            return None
        words = ffi.new("uint32_t[12]")
        words[0] = COOP2_STYPE
        ffi.cast("void **", words + 2)[0] = self.features2.pNext
        self.features2.pNext = ffi.cast("void *", words)
        # its decode functions take buffer references (GL_EXT_buffer_reference): device addresses
        bda = new("VkPhysicalDeviceBufferDeviceAddressFeatures*")
        bda.pNext = self.features2.pNext
        self.features2.pNext = bda
        self._coop2_words = (words, bda)  # alive as long as the chain (device creation reads it)
        self.enable_exts.append(COOP2_EXT)
        return words

    def __init__(self, index: int, physical, inst_api: int, instance=None, layer_version: int = 0):
        self.physical = physical
        n = ffi.new("uint32_t*")
        check(
            "vkEnumerateDeviceExtensionProperties",
            lib.vkEnumerateDeviceExtensionProperties(physical, NULL, n, NULL),
        )
        eprops = ffi.new("VkExtensionProperties[]", n[0])
        check(
            "vkEnumerateDeviceExtensionProperties",
            lib.vkEnumerateDeviceExtensionProperties(physical, NULL, n, eprops),
        )
        self.extensions = {to_str(e.extensionName) for e in eprops[0 : n[0]]}
        base = ffi.new("VkPhysicalDeviceProperties*")
        lib.vkGetPhysicalDeviceProperties(physical, base)
        self.api = min(base.apiVersion, inst_api)
        api = ((self.api >> 22) & 0x7F, (self.api >> 12) & 0x3FF)
        has = lambda core, ext: api >= core or ext in self.extensions
        # Property chain: driver + subgroup + maintenance3 (+ subgroup size control when present).
        # an old validation layer rejects the KHR cooperative-matrix structs themselves (unknown
        # sType in vkGetPhysicalDeviceProperties2 / vkCreateDevice): not even asked while validating
        old_layer = self.old_layer = coopmat.old_layer_reason(layer_version)
        khr_coop = "VK_KHR_cooperative_matrix" in self.extensions and not old_layer
        keep = []
        props2 = new("VkPhysicalDeviceProperties2*")
        drv = sub = m3 = ssc = idp = cmp = None
        chain = [
            ("VkPhysicalDeviceSubgroupProperties", True),
            ("VkPhysicalDeviceMaintenance3Properties", True),
            ("VkPhysicalDeviceDriverProperties", has((1, 2), "VK_KHR_driver_properties")),
            ("VkPhysicalDeviceSubgroupSizeControlProperties", has((1, 3), "VK_EXT_subgroup_size_control")),
            (
                "VkPhysicalDeviceShaderIntegerDotProductProperties",
                has((1, 3), "VK_KHR_shader_integer_dot_product"),
            ),
            ("VkPhysicalDeviceCooperativeMatrixPropertiesKHR", khr_coop),
        ]
        for sname, ok in chain:
            if ok:
                s = new(sname + "*")
                s.pNext = props2.pNext
                props2.pNext = s
                keep.append(s)
                drv = s if sname.endswith("DriverProperties") else drv
                sub = s if sname.endswith("SubgroupProperties") else sub
                m3 = s if sname.endswith("Maintenance3Properties") else m3
                ssc = s if sname.endswith("ControlProperties") else ssc
                idp = s if sname.endswith("IntegerDotProductProperties") else idp
                cmp = s if sname.endswith("CooperativeMatrixPropertiesKHR") else cmp
        lib.vkGetPhysicalDeviceProperties2(physical, props2)
        p, lim = props2.properties, props2.properties.limits
        # Feature chain: kept on the probe; device creation passes the same structs to enable them.
        self.features2 = new("VkPhysicalDeviceFeatures2*")
        self.feature_structs = []
        self.enable_exts = []
        for sname, core, ext, _ in FEATURE_STRUCTS:
            if has(core, ext) and (khr_coop or ext != "VK_KHR_cooperative_matrix"):
                s = new(sname + "*")
                s.pNext = self.features2.pNext
                self.features2.pNext = s
                self.feature_structs.append((sname, s))
                if api < core:
                    self.enable_exts.append(ext)
            else:
                self.feature_structs.append((sname, None))
        cm2 = None if old_layer else self._chain_coop2()  # an old layer knows its struct no more
        lib.vkGetPhysicalDeviceFeatures2(physical, self.features2)
        feats: dict = {}
        for (sname, s), (_, _, _, fields) in zip(self.feature_structs, FEATURE_STRUCTS):
            for fname, key in fields.items():
                feats[key] = bool(s is not None and getattr(s, fname))
        qn = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, qn, NULL)
        qfs = ffi.new("VkQueueFamilyProperties[]", qn[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, qn, qfs)
        compute = [i for i in range(qn[0]) if qfs[i].queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
        self.queue_family = compute[0] if compute else None
        self.timestamp_bits = qfs[self.queue_family].timestampValidBits if compute else 0
        ops = sub.supportedOperations
        feats.update(
            {
                "int16": bool(self.features2.features.shaderInt16),
                "int64": bool(self.features2.features.shaderInt64),
                "subgroup_size": int(sub.subgroupSize),
                "subgroup_ops": [n for i, n in enumerate(SUBGROUP_OPS) if ops & (1 << i)],
                "subgroup_arithmetic": bool(
                    ops & vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT
                    and sub.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
                ),
                "min_subgroup_size": int(ssc.minSubgroupSize) if ssc is not None else int(sub.subgroupSize),
                "max_subgroup_size": int(ssc.maxSubgroupSize) if ssc is not None else int(sub.subgroupSize),
                "subgroup_size_compute": bool(
                    ssc is not None and ssc.requiredSubgroupSizeStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
                ),
                "push_descriptors": "VK_KHR_push_descriptor" in self.extensions,
                "timestamps": bool(self.timestamp_bits and lim.timestampPeriod > 0),
                # the packed 4x8-bit dot products the q4_k kernel uses run as instructions, not emulated
                "integer_dot_fast": bool(
                    idp is not None
                    and idp.integerDotProduct4x8BitPackedUnsignedAccelerated
                    and idp.integerDotProduct4x8BitPackedMixedSignednessAccelerated
                ),
            }
        )
        # workgroup scope and tensor addressing (bench/coop2_probe.py's kernel uses both)
        feats["coop2"] = bool(cm2 is not None and cm2[COOP2_WORKGROUP_SCOPE] and cm2[COOP2_TENSOR_ADDRESSING])
        cm_stage = cmp is not None and cmp.cooperativeMatrixSupportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
        feats["coop_matrix_khr"] = bool(feats["coop_matrix_khr"] and cm_stage)
        feats["coop_matrix_nv"] = "VK_NV_cooperative_matrix" in self.extensions  # for the reason only
        feats["coop_shapes"] = _coop_shapes(physical, instance) if feats["coop_matrix_khr"] else []
        from vkdecode.vk.glslang import khr_compiler_error

        feats.update(
            coopmat.choose(feats, khr_compiler_error() if feats["coop_matrix_khr"] else "", layer_version)
        )
        if old_layer and "VK_KHR_cooperative_matrix" in self.extensions:
            feats["coop_reason"] = old_layer
        if feats["push_descriptors"]:
            self.enable_exts.append("VK_KHR_push_descriptor")
        if "VK_KHR_portability_subset" in self.extensions:  # required when present (MoltenVK)
            self.enable_exts.append("VK_KHR_portability_subset")
        limits = {
            "max_storage_buffer_range": int(lim.maxStorageBufferRange),
            "max_workgroup_size": tuple(lim.maxComputeWorkGroupSize),
            "max_workgroup_count": tuple(lim.maxComputeWorkGroupCount),
            "max_workgroup_invocations": int(lim.maxComputeWorkGroupInvocations),
            "max_shared_memory": int(lim.maxComputeSharedMemorySize),
            "max_push_constants": int(lim.maxPushConstantsSize),
            "timestamp_period": float(lim.timestampPeriod),
            "timestamp_valid_bits": int(self.timestamp_bits),
            "min_storage_buffer_offset_alignment": int(lim.minStorageBufferOffsetAlignment),
            "max_memory_allocation_size": int(m3.maxMemoryAllocationSize),
            "max_bound_descriptor_sets": int(lim.maxBoundDescriptorSets),
            "max_storage_buffers_per_stage": int(lim.maxPerStageDescriptorStorageBuffers),
        }
        mp = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(physical, mp)
        self.memory_types = [
            (int(mp.memoryTypes[i].propertyFlags), int(mp.memoryTypes[i].heapIndex))
            for i in range(mp.memoryTypeCount)
        ]
        heaps = []
        for h in range(mp.memoryHeapCount):
            flags = [f for f, hi in self.memory_types if hi == h]
            heaps.append(
                {
                    "index": h,
                    "size": int(mp.memoryHeaps[h].size),
                    "device_local": bool(mp.memoryHeaps[h].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT),
                    "host_visible": any(f & vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT for f in flags),
                    "host_cached": any(f & vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT for f in flags),
                }
            )
        vendor = VENDORS.get(p.vendorID, f"0x{p.vendorID:04x}")
        driver_name = to_str(drv.driverName) if drv is not None else ""
        name = to_str(p.deviceName)
        if p.vendorID == 0x10005 and ("llvmpipe" in name or driver_name == "llvmpipe"):
            vendor = "Mesa (lavapipe)"
        self.info = DeviceInfo(
            index=index,
            name=name,
            vendor=vendor,
            vendor_id=int(p.vendorID),
            device_id=int(p.deviceID),
            device_type=TYPES.get(p.deviceType, "other"),
            driver_name=driver_name,
            driver_info=to_str(drv.driverInfo) if drv is not None else "",
            driver_version=_driver_version(p.vendorID, p.driverVersion),
            api_version=version_str(p.apiVersion),
            limits=limits,
            features=feats,
            memory_heaps=heaps,
        )


def _coop_shapes(physical, instance) -> list[str]:
    """The device's VkCooperativeMatrixPropertiesKHR entries (coopmat.shape_name); the array the
    driver fills is a local held across both calls."""
    fn = ffi.cast(
        "PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR",
        lib.vkGetInstanceProcAddr(instance or NULL, b"vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"),
    )
    if fn == NULL:
        return []
    n = ffi.new("uint32_t*")
    check("vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", fn(physical, n, NULL))
    props = ffi.new("VkCooperativeMatrixPropertiesKHR[]", max(n[0], 1))
    for i in range(n[0]):
        props[i].sType = stype("VkCooperativeMatrixPropertiesKHR")
    check(
        "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", fn(physical, n, props), ok=(0, vk.VK_INCOMPLETE)
    )
    return [
        coopmat.shape_name(p.MSize, p.NSize, p.KSize, p.AType, p.BType, p.CType, p.ResultType, p.scope)
        for p in props[0 : n[0]]
    ]


def _driver_version(vendor_id: int, v: int) -> str:
    if vendor_id == 0x10DE:  # NVIDIA packs 10.8.8.6 bits; printed the way nvidia-smi does (580.159.04)
        tail = f".{v & 0x3F}" if v & 0x3F else ""
        return f"{(v >> 22) & 0x3FF}.{(v >> 14) & 0xFF}.{(v >> 6) & 0xFF:02d}{tail}"
    return version_str(v)

"""VkInstance with optional validation, and logical-device creation from a probed physical device
(probe.py). Split out of device.py to keep both files small; device.py holds the public API.
"""

from __future__ import annotations

from vkdecode.errors import NoDeviceError, VulkanError
from vkdecode.vk.ffi import (
    NULL,
    check,
    cstr,
    cstr_array,
    ffi,
    lib,
    make_version,
    new,
    require_loader,
    to_str,
    version_str,
    vk,
)
from vkdecode.vk.probe import Probe

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"


def _layers() -> dict[str, int]:
    """Installed instance layers: name -> the Vulkan version its spec follows."""
    n = ffi.new("uint32_t*")
    check("vkEnumerateInstanceLayerProperties", lib.vkEnumerateInstanceLayerProperties(n, NULL))
    props = ffi.new("VkLayerProperties[]", n[0])
    check("vkEnumerateInstanceLayerProperties", lib.vkEnumerateInstanceLayerProperties(n, props))
    return {to_str(p.layerName): int(p.specVersion) for p in props[0 : n[0]]}


def _instance_exts(layer=None) -> set[str]:
    name = cstr(layer) if layer else NULL
    n = ffi.new("uint32_t*")
    check("vkEnumerateInstanceExtensionProperties", lib.vkEnumerateInstanceExtensionProperties(name, n, NULL))
    props = ffi.new("VkExtensionProperties[]", n[0])
    check(
        "vkEnumerateInstanceExtensionProperties", lib.vkEnumerateInstanceExtensionProperties(name, n, props)
    )
    return {to_str(p.extensionName) for p in props[0 : n[0]]}


class Instance:
    """A VkInstance; with validate, the Khronos layer + sync validation + an error-collecting messenger."""

    def __init__(self, validate: bool):
        require_loader()
        self.handle = None
        self.messenger = None
        self.messages: list[str] = []
        self.validate = validate
        self.layer_version = 0  # the validation layer's spec version when validating (probe.py)
        try:
            ver = ffi.new("uint32_t*")
            inst_api = make_version(1, 0)
            if lib.vkEnumerateInstanceVersion(ver) == vk.VK_SUCCESS:
                inst_api = min(ver[0], make_version(1, 3))
            if inst_api < make_version(1, 1):
                raise NoDeviceError(f"the Vulkan loader supports only {version_str(inst_api)}; 1.1 is needed")
            exts = _instance_exts()
        except VulkanError as e:
            raise NoDeviceError(f"no usable Vulkan loader/driver: {e}") from None
        layers, want_exts, flags = [], [], 0
        if "VK_KHR_portability_enumeration" in exts:  # lists MoltenVK devices on macOS
            want_exts.append("VK_KHR_portability_enumeration")
            flags |= vk.VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR
        keep = []
        pnext = NULL
        if validate:
            self.layer_version = _layers().get(VALIDATION_LAYER, 0)
            if not self.layer_version:
                raise VulkanError(
                    f"validation requested (VKDECODE_VALIDATE=1) but {VALIDATION_LAYER} is not "
                    "installed; on Debian/Ubuntu: apt-get install vulkan-validationlayers"
                )
            layers.append(VALIDATION_LAYER)
            want_exts.append("VK_EXT_debug_utils")
            self._callback = ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT", self._on_message)
            dbg = new(
                "VkDebugUtilsMessengerCreateInfoEXT*",
                {
                    "messageSeverity": vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                    | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                    "messageType": vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                    | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                    | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
                    "pfnUserCallback": self._callback,
                },
            )
            self._dbg_info = dbg
            pnext = dbg  # also catches messages from vkCreateInstance/vkDestroyInstance themselves
            if "VK_EXT_validation_features" in _instance_exts(VALIDATION_LAYER):
                want_exts.append("VK_EXT_validation_features")
                enables = ffi.new(
                    "VkValidationFeatureEnableEXT[]",
                    [vk.VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT],
                )
                vf = new(
                    "VkValidationFeaturesEXT*",
                    {"enabledValidationFeatureCount": 1, "pEnabledValidationFeatures": enables, "pNext": dbg},
                )
                keep += [enables, vf]
                pnext = vf
        app_name, eng_name = cstr("vkdecode"), cstr("vkdecode")
        app = new(
            "VkApplicationInfo*",
            {"pApplicationName": app_name, "pEngineName": eng_name, "apiVersion": inst_api},
        )
        layer_arr, layer_keep = cstr_array(layers)
        ext_arr, ext_keep = cstr_array(want_exts)
        info = new(
            "VkInstanceCreateInfo*",
            {
                "pNext": pnext,
                "flags": flags,
                "pApplicationInfo": app,
                "enabledLayerCount": len(layers),
                "ppEnabledLayerNames": layer_arr,
                "enabledExtensionCount": len(want_exts),
                "ppEnabledExtensionNames": ext_arr,
            },
        )
        out = ffi.new("VkInstance*")
        res = lib.vkCreateInstance(info, NULL, out)
        if res in (vk.VK_ERROR_INCOMPATIBLE_DRIVER, vk.VK_ERROR_INITIALIZATION_FAILED):
            raise NoDeviceError(
                "no Vulkan device found (vkCreateInstance: no driver; on a machine without a "
                "GPU install mesa-vulkan-drivers for lavapipe)"
            )
        check("vkCreateInstance", res)
        self.handle = out[0]
        del keep, layer_keep, ext_keep, app_name, eng_name
        try:
            if validate:
                fn = ffi.cast(
                    "PFN_vkCreateDebugUtilsMessengerEXT",
                    lib.vkGetInstanceProcAddr(self.handle, b"vkCreateDebugUtilsMessengerEXT"),
                )
                m = ffi.new("VkDebugUtilsMessengerEXT*")
                check("vkCreateDebugUtilsMessengerEXT", fn(self.handle, self._dbg_info, NULL, m))
                self.messenger = m[0]
            n = ffi.new("uint32_t*")
            check("vkEnumeratePhysicalDevices", lib.vkEnumeratePhysicalDevices(self.handle, n, NULL))
            pds = ffi.new("VkPhysicalDevice[]", n[0])
            check("vkEnumeratePhysicalDevices", lib.vkEnumeratePhysicalDevices(self.handle, n, pds))
            if n[0] == 0:
                raise NoDeviceError("no Vulkan device found (the loader lists no physical device)")
            self.probes = [Probe(i, pds[i], inst_api, self.handle, self.layer_version) for i in range(n[0])]
        except BaseException:
            self.close()
            raise

    def _on_message(self, severity, types, data, user):
        msg = to_str(data.pMessage) if data.pMessage != NULL else ""
        ident = to_str(data.pMessageIdName) if data.pMessageIdName != NULL else ""
        is_error = severity & vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT
        if is_error or "SYNC-HAZARD" in ident or "SYNC-HAZARD" in msg:
            self.messages.append(f"[{ident}] {msg}")
        return vk.VK_FALSE

    def close(self) -> None:
        if self.handle is not None:
            if self.messenger is not None:
                fn = ffi.cast(
                    "PFN_vkDestroyDebugUtilsMessengerEXT",
                    lib.vkGetInstanceProcAddr(self.handle, b"vkDestroyDebugUtilsMessengerEXT"),
                )
                fn(self.handle, self.messenger, NULL)
                self.messenger = None
            lib.vkDestroyInstance(self.handle, NULL)
            self.handle = None


def create_logical_device(probe: Probe):
    """VkDevice with one compute queue and every probed optional feature the device supports."""
    if probe.queue_family is None:
        raise VulkanError(f"{probe.info.name} has no compute queue")
    prio = ffi.new("float[]", [1.0])
    qinfo = new(
        "VkDeviceQueueCreateInfo*",
        {"queueFamilyIndex": probe.queue_family, "queueCount": 1, "pQueuePriorities": prio},
    )
    f = probe.features2
    supported = f.features
    enable = new("VkPhysicalDeviceFeatures2*", {"pNext": f.pNext})  # same extension structs, as queried
    enable.features.shaderInt16 = supported.shaderInt16
    enable.features.shaderInt64 = supported.shaderInt64
    for sname, s in probe.feature_structs:
        if s is not None and sname.endswith("SubgroupSizeControlFeatures"):
            s.computeFullSubgroups = s.computeFullSubgroups and s.subgroupSizeControl
    ext_arr, ext_keep = cstr_array(probe.enable_exts)
    info = new(
        "VkDeviceCreateInfo*",
        {
            "pNext": enable,
            "queueCreateInfoCount": 1,
            "pQueueCreateInfos": qinfo,
            "enabledExtensionCount": len(probe.enable_exts),
            "ppEnabledExtensionNames": ext_arr,
        },
    )
    out = ffi.new("VkDevice*")
    check("vkCreateDevice", lib.vkCreateDevice(probe.physical, info, NULL, out))
    del ext_keep, prio
    return out[0], probe.queue_family

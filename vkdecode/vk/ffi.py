"""cffi plumbing shared by the vk wrappers: the loader, result checking, explicit struct building.

We call `vk.lib` (the raw C entry points) with structs built by `ffi.new` and held in Python
locals, instead of the `vulkan` package's convenience constructors: those build nested char* and
structs as temporaries that can be freed before the call runs (NVIDIA then sees a garbage pName
and vkCreateComputePipelines fails with VK_ERROR_UNKNOWN; lavapipe happens to work).
"""

from __future__ import annotations

import re

from vkdecode.errors import NoDeviceError, VulkanError

try:
    import vulkan as vk
    from vulkan import ffi, lib

    LOADER_ERROR = None
except OSError as e:  # no libvulkan.so.1: keep `import vkdecode.vk` working for GPU-less tests
    vk = ffi = lib = None
    LOADER_ERROR = str(e)

NULL = ffi.NULL if ffi is not None else None


def require_loader() -> None:
    if vk is None:
        raise NoDeviceError(
            "no Vulkan loader found (libvulkan.so.1); on Debian/Ubuntu install libvulkan1 and "
            f"mesa-vulkan-drivers ({LOADER_ERROR})"
        )


def _result_names() -> dict[int, str]:
    """VkResult value -> name, preferring the core name over a _KHR/_EXT alias."""
    names: dict[int, str] = {}
    if vk is None:
        return names
    for k in sorted(dir(vk), key=lambda k: k.endswith(("_KHR", "_EXT"))):
        if k.startswith("VK_ERROR_") or k in ("VK_SUCCESS", "VK_NOT_READY", "VK_TIMEOUT", "VK_INCOMPLETE"):
            v = getattr(vk, k)
            if isinstance(v, int) and not k.endswith("_MAX_ENUM"):
                names.setdefault(v, k)
    return names


RESULT_NAMES = _result_names()


def result_name(code: int) -> str:
    return RESULT_NAMES.get(code, f"VkResult({code})")


def check(call: str, result: int, ok: tuple = (0,)) -> int:
    """Raise VulkanError naming the call and the VkResult unless result is in ok."""
    if result not in ok:
        raise VulkanError(f"{call} failed: {result_name(result)}")
    return result


def wrap_exc(call: str, exc: BaseException) -> VulkanError:
    """Turn an exception class raised by the `vulkan` package (VkErrorDeviceLost...) into ours."""
    name = exc.__name__ if isinstance(exc, type) else type(exc).__name__
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()  # VkErrorDeviceLost -> VK_ERROR_DEVICE_LOST
    return VulkanError(f"{call} failed: {snake}")


def new(ctype: str, init=None):
    """ffi.new with sType filled in from the struct name (VkFooBarEXT -> VK_STRUCTURE_TYPE_FOO_BAR_EXT)."""
    p = ffi.new(ctype, init)
    base = ctype.split("[")[0].rstrip("* ")
    if ctype.endswith("*") and "sType" in dict(ffi.typeof(base).fields):
        p.sType = stype(base)
    return p


_STYPES: dict[str, int] = {}


def stype(struct_name: str) -> int:
    """sType for a struct name: VK_STRUCTURE_TYPE_* matched with underscores ignored."""
    if not _STYPES:
        for k in dir(vk):
            if k.startswith("VK_STRUCTURE_TYPE_"):
                _STYPES.setdefault(k[18:].replace("_", ""), getattr(vk, k))
    return _STYPES[struct_name[2:].upper()]


def cstr(value: str):
    """A char[] that lives as long as the returned object does: keep it in a local."""
    return ffi.new("char[]", value.encode())


def cstr_array(values: list[str]):
    """(char*[] , keepalive list): both must stay referenced until the call returns."""
    keep = [cstr(v) for v in values]
    arr = ffi.new("char*[]", keep) if keep else NULL
    return arr, keep


def to_str(chars) -> str:
    return ffi.string(chars).decode("utf-8", "replace")


def version_str(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def make_version(major: int, minor: int, patch: int = 0) -> int:
    return (major << 22) | (minor << 12) | patch


def handle_out(ctype: str):
    """An out-parameter for a Vulkan handle: ffi.new('VkBuffer*')."""
    return ffi.new(ctype + "*")

"""The project's own error types. User errors are VkDecodeError subclasses; the CLI prints their
message and exits non-zero without a traceback."""


class VkDecodeError(Exception):
    exit_code = 1


class ModelError(VkDecodeError):
    """A model file or directory that cannot be loaded (names the file and the tensor or key)."""


class VulkanError(VkDecodeError):
    """A failing Vulkan call; the message names the call and the VkResult."""


class DeviceMemoryError(VulkanError):
    """Not enough device memory: the model does not fit, or vkAllocateMemory ran out (names the bytes)."""


class DeviceLimitError(VkDecodeError):
    """A model the device cannot take as lowered: a tensor past a limit it reports (names both)."""


class NoDeviceError(VkDecodeError):
    exit_code = 2


class ShaderError(VkDecodeError):
    """glslangValidator missing, or a shader that does not compile (names file and line)."""


class ContextError(VkDecodeError):
    """A prompt longer than the context, or decoding past it."""


class UsageError(VkDecodeError):
    """A bad argument from the user (sampling parameters, modes, ...)."""

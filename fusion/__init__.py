"""Pure-Python decode-step IR and the pattern matcher that fuses it (no Vulkan, no vkdecode)."""
from fusion.ir import Op, Program, Value, IRError  # noqa: F401

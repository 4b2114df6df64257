"""vkdecode: LLM decode on any Vulkan GPU, recorded once and replayed every token."""

__version__ = "0.1.0"


def load(path, device=None, **kw):
    """Load a GGUF file or Hugging Face directory onto a Vulkan device; keyword options are
    vkdecode.options.DecodeOptions fields (mode="fused", ctx=4096, ...); see vkdecode.api.load."""
    from vkdecode.api import load as _load

    return _load(path, device=device, **kw)

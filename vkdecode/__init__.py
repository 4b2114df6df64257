"""vkdecode: LLM decode on any Vulkan GPU, recorded once and replayed every token."""
__version__ = "0.1.0"


def load(path, device=None, mode: str = "fused", ctx: int | None = 4096, **kw):
    """Load a GGUF file or Hugging Face directory onto a Vulkan device; see vkdecode.api.Model."""
    from vkdecode.api import load as _load
    return _load(path, device=device, mode=mode, ctx=ctx, **kw)

"""vkdecode: LLM decode on any Vulkan GPU, recorded once and replayed every token."""
__version__ = "0.1.0"

"""Executors of a decode Program on a Vulkan device, one interface for every mode."""
from __future__ import annotations

MODES = ("fused", "replay-nofuse", "unfused")


def make_executor(mode: str, device, program, weights, **kw):
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.executors.unfused import UnfusedExecutor
    if mode == "unfused":
        kw.pop("rules", None)
        kw.pop("profile", None)
        return UnfusedExecutor(device, program, weights, **kw)
    if mode in ("fused", "replay-nofuse"):
        return ReplayExecutor(device, program, weights, fuse=(mode == "fused"), **kw)
    raise ValueError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")

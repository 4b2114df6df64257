"""Executors of a decode Program on a Vulkan device, one interface for every mode; decoder.py
composes one with its prompt chunks and speculative verify step."""

from __future__ import annotations

from vkdecode.options import MODES


def make_executor(mode: str, device, program, weights, **kw):
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.executors.unfused import UnfusedExecutor

    if mode == "unfused":
        for key in ("rules", "profile"):
            kw.pop(key, None)
        if kw.get("tokens_per_submit", 1) == 1:  # one step per submit is what unfused does
            kw.pop("tokens_per_submit", None)
        return UnfusedExecutor(device, program, weights, **kw)
    if mode in ("fused", "replay-nofuse"):
        return ReplayExecutor(device, program, weights, fuse=(mode == "fused"), **kw)
    raise ValueError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")

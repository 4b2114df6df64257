"""Region -> kernel calls. A rule with a fused kernel lowers to it; any other region (and every
region in no-fuse mode) lowers to its ops' own kernels, so a fused region always equals its ops."""
from __future__ import annotations

from collections.abc import Callable

from fusion.ir import Program
from fusion.rules import Region
from vkdecode.kernels import KernelCall, KernelCaps, op_calls

# rule name -> builder of that rule's fused kernel calls; fused kernel modules register here
FUSED: dict[str, Callable[[Program, Region, KernelCaps], list[KernelCall]]] = {}


def region_calls(program: Program, region: Region, caps: KernelCaps, fuse: bool = True) -> list[KernelCall]:
    build = FUSED.get(region.rule) if fuse else None
    if build is not None:
        calls = build(program, region, caps)
        if calls is not None:
            return calls
    return [c for i in region.ops for c in op_calls(program, i, caps)]


def _load_fused_kernels() -> None:
    try:
        import vkdecode.fused_kernels  # noqa: F401  (registers into FUSED)
    except ImportError as e:  # only while the module does not exist yet
        if e.name != "vkdecode.fused_kernels":
            raise


_load_fused_kernels()

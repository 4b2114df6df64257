"""LazyWeight: a weight known by dtype and shape whose GPU-layout parts are made only when asked.

The API's load (api.Model) uploads each weight as it is packed and drops the packed copy right
after (executors/plan.py calls packed() once per weight), so a model's host memory holds at most
one tensor's packed copy besides the device's, not a second copy of every weight. The tensor's
bytes are read from the file at that moment (read_bytes: a plain read, no mapping of the whole
file whose touched pages would stay resident). load_weights(stream=False) packs them all at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from vkdecode.errors import ModelError
from vkdecode.quant.blocks import PackedWeight, packed_part_bytes


@dataclass(frozen=True)
class LazyWeight:
    dtype: str  # a registry.DTYPES name, decided from the file's tensor type and shape alone
    shape: tuple[int, ...]  # logical (out, in), or (n,)
    make: Callable[[], PackedWeight]  # reads the tensor and packs it, each call afresh

    @property
    def part_bytes(self) -> dict[str, int]:
        return packed_part_bytes(self.dtype, self.shape)

    @property
    def nbytes(self) -> int:
        return sum(self.part_bytes.values())

    def packed(self) -> PackedWeight:
        """The parts, made now; checked against dtype, shape and part_bytes, since the memory plan
        sized and placed the slices from those before packing."""
        w = self.make()
        if (w.dtype, tuple(w.shape), w.part_bytes) != (self.dtype, tuple(self.shape), self.part_bytes):
            raise AssertionError(
                f"packed {w.dtype} {tuple(w.shape)} {w.part_bytes}, announced "
                f"{self.dtype} {tuple(self.shape)} {self.part_bytes} (a vkdecode bug)"
            )
        return w

    def dequantize(self) -> np.ndarray:
        return self.packed().dequantize()


def read_bytes(path: str, offset: int, nbytes: int) -> np.ndarray:
    """nbytes of the file from offset, as a fresh uint8 array (freed with it: nothing stays mapped)."""
    a = np.fromfile(path, dtype=np.uint8, count=nbytes, offset=offset)
    if a.size != nbytes:  # the file changed since its header was checked
        raise ModelError(f"{path}: {nbytes} bytes expected at offset {offset}, read {a.size} (truncated?)")
    return a

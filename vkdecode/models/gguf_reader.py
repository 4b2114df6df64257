"""The GGUF reader vkdecode loads with: gguf-py's GGUFReader, with its exceptions turned into
ModelError naming the file and the problem (truncation above all), and its metadata arrays kept
compact.

Why compact: the stock reader makes a numpy view of every array element (two for a string: its
length and its bytes). SmolLM2-135M's 49,152 tokens and 48,900 merges came to ~157 MiB of Python
objects for a 98 MB file, the whole of the load's host peak (lavapipe: 3.24x the file, where
issue 33 asks <= 2.5x). An array of strings is kept as one bytes object an element, a numeric
array as one view; `contents()` gives what the stock field gives.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import gguf
import numpy as np

from vkdecode.errors import ModelError

_ARRAY, _STRING = int(gguf.GGUFValueType.ARRAY), int(gguf.GGUFValueType.STRING)


class CompactArray(NamedTuple):
    """A metadata array as the stock ReaderField answers it (offset, name, types, contents(); data:
    one index an element, for len) with its values held whole: `values` is a list of bytes (an
    array of strings, decoded by contents(), so bad UTF-8 is the caller's error naming the key)
    or one numpy view (numbers)."""

    offset: int
    name: str
    parts: list
    data: range
    types: list
    values: object

    def contents(self, index_or_slice: int | slice = slice(None)):
        if self.types[-1] == gguf.GGUFValueType.STRING:
            if isinstance(index_or_slice, int):
                return str(self.values[index_or_slice], encoding="utf-8")
            return [str(b, encoding="utf-8") for b in self.values[index_or_slice]]
        return self.values[index_or_slice].tolist()


def open_gguf(path: str):
    """GGUFReader, with its exceptions (bad magic, truncation, ...) turned into ModelError."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelError(f"{path}: cannot open: {e}") from None
    if magic != b"GGUF":
        raise ModelError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    try:
        return _Reader(path)
    except ModelError as e:
        raise ModelError(f"{path}: {e}") from None
    except Exception as e:  # noqa: BLE001 - the reader raises ValueError/IndexError/... on truncated files
        raise ModelError(f"{path}: cannot read GGUF ({type(e).__name__}: {e}; truncated?)") from None


class _Reader(gguf.GGUFReader):
    """Says a file is truncated where the stock reader would fail with numpy's words: a header
    (metadata, tensor infos) that runs past the end of the file, and the first tensor whose data
    does (the stock reader fails later with a reshape error that names no tensor)."""

    def _get(self, offset, dtype, count=1, override_order=None):
        end = int(offset) + np.dtype(dtype).itemsize * int(count)
        if end > len(self.data):  # numpy would return a short view: IndexError / ValueError next
            raise ModelError(f"truncated: its header runs past the end of the file ({len(self.data)} bytes)")
        return super()._get(offset, dtype, count, override_order)

    def _build_tensors(self, start_offs, fields):
        size = len(self.data)
        for field in fields:
            try:
                _, name, _, dims, raw_dtype, offset = field.parts
                block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(int(raw_dtype[0]))]
                # Python ints: fuzzed u64 fields must not wrap (numpy scalars would, with a warning)
                end = int(start_offs) + int(offset[0]) + math.prod(int(d) for d in dims) * type_size // block
                name = bytes(name).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - layout not as expected: leave the checking to the reader
                break
            if end > size:
                raise ModelError(
                    f"tensor {name!r} ends at byte {end}, past the end of the file ({size} bytes; truncated?)"
                )
        super()._build_tensors(start_offs, fields)

    def _build_fields(self, offs, count):
        for _ in range(count):
            compact = self._compact_array(offs)
            if compact is None:
                offs = super()._build_fields(offs, 1)  # one field the stock way
            else:
                field, offs = compact
                self._push_field(field, skip_sum=True)
        return offs

    def _compact_array(self, offs: int):
        """(CompactArray, the offset after it) for the key-value pair at offs when it is an array
        of strings or of numbers, else None."""
        klen, kdata = self._get_str(offs)
        at = offs + int(klen.nbytes + kdata.nbytes)
        raw_type = self._get(at, np.uint32)
        if int(raw_type[0]) != _ARRAY:
            return None
        itype, n = self._get(at + 4, np.uint32), self._get(at + 8, np.uint64)
        start, sub = at + 16, int(itype[0])
        nptype = self.gguf_scalar_to_np.get(gguf.GGUFValueType(sub)) if sub != _STRING else None
        if sub != _STRING and nptype is None:
            return None  # nested arrays: the stock reader's parts
        types = [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType(sub)]
        if nptype is not None:
            values = self._get(start, nptype, int(n[0]))
            end = start + int(values.nbytes)
        else:
            values, end = self._strings(start, int(n[0]))
        name = str(bytes(kdata), encoding="utf-8")
        parts = [klen, kdata, raw_type, itype, n]
        return CompactArray(offs, name, parts, range(int(n[0])), types, values), end

    def _strings(self, pos: int, n: int) -> tuple[list[bytes], int]:
        """n GGUF strings (u64 length, bytes) from pos: their bytes, and the offset after them."""
        size, order = len(self.data), "little" if self.byte_order == "I" else "big"
        if pos + 8 * n > size:  # each needs its length at least: a fuzzed count stops here
            raise ModelError(f"truncated: its header runs past the end of the file ({size} bytes)")
        buf, out = memoryview(self.data), []
        for _ in range(n):
            slen = int.from_bytes(buf[pos : pos + 8], order) if pos + 8 <= size else size
            pos += 8
            if pos + slen > size:
                raise ModelError(f"truncated: its header runs past the end of the file ({size} bytes)")
            out.append(bytes(buf[pos : pos + slen]))
            pos += slen
        return out, pos

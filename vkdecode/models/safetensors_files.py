"""Safetensors files of an HF model directory: the shard index, each shard's JSON header checked
against the file, and one tensor read as a numpy array (models/weights.py packs it)."""

from __future__ import annotations

import glob
import json
import os

import numpy as np

from vkdecode.errors import ModelError
from vkdecode.models.lazy import read_bytes


def safetensors_index(path: str) -> dict[str, str]:
    """tensor name -> shard file, from model.safetensors.index.json or the shards' headers."""
    index = os.path.join(path, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
            if not all(isinstance(v, str) for v in weight_map.values()):
                raise ValueError("weight_map values must be file names")
            return {k: os.path.join(path, v) for k, v in weight_map.items()}
        except (OSError, KeyError, TypeError, AttributeError, ValueError) as e:
            raise ModelError(f"{index}: cannot read the shard index ({type(e).__name__}: {e})") from None
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if not files:
        raise ModelError(f"{path}: no *.safetensors files in the model directory")
    out = {}
    for file in files:
        for name in read_header(file):
            out[name] = file
    return out


def read_header(file: str) -> dict:
    """The safetensors JSON header (name -> dtype, shape, data_offsets), every entry checked
    against the file so that reading a tensor later cannot fail on a corrupt header."""
    try:
        with open(file, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            size = os.fstat(f.fileno()).st_size
            if n <= 0 or 8 + n > size:
                raise ValueError(f"header length {n} does not fit a {size}-byte file")
            header = json.loads(f.read(n))
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: deeply nested JSON
        raise ModelError(f"{file}: not a safetensors file ({type(e).__name__}: {e})") from None
    if not isinstance(header, dict):
        raise ModelError(f"{file}: not a safetensors file (the header is a JSON {type(header).__name__})")
    header.pop("__metadata__", None)
    for name, h in header.items():
        _check_entry(file, name, h, 8 + n, size)
    return {k: dict(v, _base=8 + n) for k, v in header.items()}


ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


def _check_entry(file: str, name: str, h, base: int, size: int) -> None:
    """One header entry: known fields of the right types, offsets inside the data, and a byte
    count that matches dtype x shape (else the reshape fails later with a numpy error)."""
    if not isinstance(h, dict) or not {"dtype", "shape", "data_offsets"} <= set(h):
        raise ModelError(f"{file}: tensor {name!r}: header entry needs dtype, shape and data_offsets")
    shape, offs = h["shape"], h["data_offsets"]
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise ModelError(f"{file}: tensor {name!r} has a bad shape {shape!r}")
    if not (
        isinstance(offs, list)
        and len(offs) == 2
        and all(type(o) is int for o in offs)
        and 0 <= offs[0] <= offs[1]
    ):
        raise ModelError(f"{file}: tensor {name!r} has bad data_offsets {offs!r}")
    if base + offs[1] > size:
        raise ModelError(
            f"{file}: tensor {name!r} ends at byte {base + offs[1]}, past the end of the file "
            f"({size} bytes; truncated?)"
        )
    np_dt = ST_DTYPES.get(h["dtype"]) if isinstance(h["dtype"], str) else None
    if (
        np_dt is not None
        and offs[1] - offs[0] != int(np.prod(shape, dtype=object)) * np.dtype(np_dt).itemsize
    ):
        raise ModelError(
            f"{file}: tensor {name!r}: {offs[1] - offs[0]} bytes do not hold a {h['dtype']} "
            f"array of shape {tuple(shape)}"
        )


def tensor_dtype(file: str, name: str, header: dict) -> str:
    """The tensor's dtype in the file, refused here (before any data is read) unless readable."""
    dt = header[name]["dtype"]
    if not isinstance(dt, str) or dt not in ST_DTYPES:
        raise ModelError(f"{file}: tensor {name!r} has unsupported dtype {dt}")
    return dt


def read_u8(file: str, name: str, header: dict) -> np.ndarray:
    """A U8 tensor (MXFP4 blocks and scales), read as stored."""
    h = header[name]
    start, end = h["data_offsets"]
    if h["dtype"] != "U8" or end - start != int(np.prod(h["shape"], dtype=object)):
        raise ModelError(f"{file}: tensor {name!r} is not a U8 array of shape {tuple(h['shape'])}")
    return read_bytes(file, h["_base"] + start, end - start).reshape(h["shape"])


def read_tensor(file: str, name: str, header: dict) -> np.ndarray:
    """The tensor as f32 or f16, read (not mapped) from the file. bf16 is read raw because numpy
    has no bfloat16."""
    h = header[name]
    dt = tensor_dtype(file, name, header)
    start, end = h["data_offsets"]
    a = read_bytes(file, h["_base"] + start, end - start).view(ST_DTYPES[dt]).reshape(h["shape"])
    if dt == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    elif dt == "F64":
        a = a.astype(np.float32)
    return a

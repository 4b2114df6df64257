"""Load weights from an HF safetensors directory or a GGUF file into GPU-layout PackedWeights.

Keys of the returned dict are the Program's weight value names (gguf_names.py). Matrices keep
the dtypes of vkdecode/quant/registry.py as stored (repacked to 32-bit words, quant/blocks.py); bf16 becomes f32; the other IQ* / TQ* / MXFP4 types (no kernel) are dequantized
to f32 at load and say so in the notes. Norm weights and biases are always 1-D f32.
"""

from __future__ import annotations

import contextlib
import glob
import json
import math
import os

import gguf
import numpy as np

from vkdecode.errors import ModelError, VkDecodeError
from vkdecode.models import ARCHITECTURES, settings
from vkdecode.models.config import ModelArgs
from vkdecode.models.gguf_names import expected_shapes, is_norm, source_name
from vkdecode.models.moe import hf_sources
from vkdecode.quant import DTYPES, PackedWeight, block_elems, pack_float, pack_gguf_blocks

# repacked, matmul and embed read them quantized (the quant dtypes of the registry, as GGUF names them)
GGUF_KEPT = tuple(gguf.GGMLQuantizationType(d.gguf_type).name for d in DTYPES.values() if d.quant)
# no native kernel: f32 at load, through gguf's dequantize (listed in the load notes)
GGUF_DEQUANT = ("BF16", "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS")
GGUF_DEQUANT += ("IQ1_M", "IQ1_S", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4")


def load_weights(path) -> tuple[ModelArgs, dict[str, PackedWeight], dict]:
    """-> (args, weights, meta). meta: format, path, notes (list[str]), source_types
    (name -> dtype in the file) and, for GGUF, the open `reader` (the tokenizer reuses it)."""
    path = str(path)
    with loading(path):
        if os.path.isdir(path):
            return _load_hf(path)
        if not os.path.exists(path):
            raise ModelError(f"{path}: no such file or directory")
        return _load_gguf(path)


@contextlib.contextmanager
def loading(path: str):
    """The loaders' boundary: only VkDecodeErrors leave it. The checks above name the problem; an
    exception they missed still becomes a ModelError naming the file, with its type and message
    (and the original as __cause__), never a bare IndexError from deep inside numpy or gguf."""
    try:
        yield
    except VkDecodeError:
        raise
    except Exception as e:  # the boundary: anything the checks missed
        raise ModelError(
            f"{path}: unexpected {type(e).__name__} while loading: {e} (a corrupt file, "
            "or a vkdecode bug: please report it)"
        ) from e


def _check_layers(path: str, args: ModelArgs, n_tensors: int) -> None:
    # a layer has 9+ tensors: a corrupt layer count (2**31) must fail here, not in expected_shapes
    if args.n_layers * 9 > n_tensors:
        raise ModelError(
            f"{path}: {args.n_layers} layers declared, but the file holds only {n_tensors} tensors"
        )


def _check_unused(path: str, present, used: set[str], ignorable=()) -> None:
    """A tensor the program does not read (an MLP bias of a Qwen GGUF, llama.cpp's rope_freqs for
    Llama 3 rope scaling, ...) would change the math if it were read: refuse the file instead of
    running without it. `ignorable`: tensors the reference implementation ignores too."""
    unused = sorted(
        n for n in present if n not in used and n not in ignorable and not n.endswith("rotary_emb.inv_freq")
    )  # old HF checkpoints: a rope cache
    if not unused:
        return
    more = f" and {len(unused) - 3} more" if len(unused) > 3 else ""
    raise ModelError(
        f"{path}: tensor(s) {', '.join(repr(n) for n in unused[:3])}{more} are not used by "
        f"this architecture's decode step; refusing rather than ignoring them"
    )


def _check_shape(file: str, tensor: str, expected, actual) -> None:
    if tuple(expected) != tuple(actual):
        raise ModelError(f"{file}: tensor {tensor!r} has shape {tuple(actual)}, expected {tuple(expected)}")


def _pack(a: np.ndarray, dtype: str) -> PackedWeight:
    """f32/f16 ndarray -> PackedWeight; vectors and odd in-dims (no f16 word pairs) go to f32. Stacked
    experts (experts, out, in) are packed as their (experts * out, in) rows."""
    a = a.reshape(-1, a.shape[-1]) if a.ndim == 3 else a
    if a.ndim == 1 or dtype != "f16" or a.shape[1] % 2:
        return pack_float(np.ascontiguousarray(a, dtype=np.float32), "f32")
    return pack_float(a, "f16")


# ---------------------------------------------------------------- safetensors


def _safetensors_index(path: str) -> dict[str, str]:
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
        for name in _header(file):
            out[name] = file
    return out


def _header(file: str) -> dict:
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


def _read_tensor(file: str, name: str, header: dict) -> tuple[np.ndarray, str]:
    """-> (array as f32 or f16, source dtype). bf16 is read raw because numpy has no bfloat16."""
    h = header[name]
    dt = h["dtype"]
    start, end = h["data_offsets"]
    np_dt = ST_DTYPES.get(dt) if isinstance(dt, str) else None
    if np_dt is None:
        raise ModelError(f"{file}: tensor {name!r} has unsupported dtype {dt}")
    if end == start:  # np.memmap refuses an empty range
        return np.zeros(h["shape"], np.float32 if dt in ("BF16", "F64") else np_dt), dt
    raw = np.memmap(file, dtype=np.uint8, mode="r", offset=h["_base"] + start, shape=(end - start,))
    a = raw.view(np_dt).reshape(h["shape"])
    if dt == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    elif dt == "F64":
        a = a.astype(np.float32)
    return np.asarray(a), dt


def _load_hf(path: str):
    args = ModelArgs.from_hf_config(path)
    where = _safetensors_index(path)
    args = settings.stored_head(args, where)  # transformers 5 keeps a stored lm_head
    _check_layers(path, args, len(where))  # and _check_unused: before reading any data
    srcs = {n: hf_sources(source_name(n, "hf", args.arch), args.n_experts) for n in expected_shapes(args)}
    _check_unused(path, where, {s for names in srcs.values() for s in names})
    headers: dict[str, dict] = {}
    weights, types = {}, {}
    plus_one = ARCHITECTURES[args.arch].hf_norms_plus_one
    for name, shape in expected_shapes(args).items():
        parts, want = [], shape[1:] if len(shape) == 3 else shape  # 3-D: one tensor per expert
        for src in srcs[name]:
            file = where.get(src)
            if file is not None and file not in headers:
                headers[file] = _header(file)
            if file is None or src not in headers[file]:
                raise ModelError(f"{file or path}: missing tensor {src!r} (expected shape {want})")
            parts.append(_read_tensor(file, src, headers[file]))
            _check_shape(file, src, want, parts[-1][0].shape)
        a, dt = (np.stack([p for p, _ in parts]), parts[0][1]) if len(shape) == 3 else parts[0]
        if plus_one and is_norm(name):
            # Gemma's RMSNorm computes x * (1 + w) in f32; fold the 1 in once (llama.cpp's
            # converter does the same, so GGUF gemma3 norms already hold 1 + w)
            a = a.astype(np.float32) + np.float32(1.0)
        weights[name] = _pack(a, "f16" if dt == "F16" else "f32")
        types[name] = dt
    meta = {"format": "safetensors", "path": path, "notes": [], "source_types": types}
    return args, weights, meta


# ---------------------------------------------------------------- GGUF


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


def _gguf_tensor(path: str, t, shape, notes: list[str]) -> PackedWeight:
    kind = t.tensor_type.name
    # The reader reports ne order (innermost first); the logical shape is the reverse.
    actual = tuple(int(d) for d in reversed(t.shape.tolist()))
    if len(shape) == 2 and shape[0] == 1 and actual == tuple(shape[1:]):
        actual = tuple(shape)  # a one-row matrix stored as a vector (qwen2moe's shared-expert gate)
    _check_shape(path, t.name, shape, actual)
    if kind == "F32":
        return _pack(np.asarray(t.data, dtype=np.float32).reshape(shape), "f32")
    if kind == "F16":
        return _pack(np.asarray(t.data).reshape(shape), "f16")
    if kind in GGUF_KEPT and len(shape) >= 2 and shape[-1] % block_elems(kind.lower()) == 0:
        rows = (math.prod(shape[:-1]), shape[-1])  # stacked experts: their rows one after another
        return pack_gguf_blocks(np.asarray(t.data), kind.lower(), rows)
    if kind in GGUF_KEPT or kind in GGUF_DEQUANT:
        if kind != "BF16":
            why = "no native kernel" if kind in GGUF_DEQUANT else f"shape {shape} does not fit its blocks"
            notes.append(f"{t.name}: {kind} dequantized to f32 at load ({why})")
        a = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        return _pack(np.asarray(a, dtype=np.float32).reshape(shape), "f32")
    raise ModelError(
        f"{path}: tensor {t.name!r} has type {kind}, which is not supported "
        f"(supported: F32, F16, {', '.join(GGUF_KEPT + GGUF_DEQUANT)})"
    )


def _load_gguf(path: str):
    reader = open_gguf(path)
    args = ModelArgs.from_gguf(reader, path)
    tensors = {t.name: t for t in reader.tensors}
    _check_layers(path, args, len(tensors))
    # rope_freqs.weight is read into args.rope_freq_factors (config_rope.gguf_rope_factors)
    _check_unused(
        path,
        tensors,
        {source_name(n, "gguf", args.arch) for n in expected_shapes(args)},
        ignorable=("rope_freqs.weight",),
    )
    weights, types, notes = {}, {}, []
    for name, shape in expected_shapes(args).items():
        src = source_name(name, "gguf", args.arch)
        t = tensors.get(src)
        if t is None:
            raise ModelError(f"{path}: missing tensor {src!r} (expected shape {shape})")
        weights[name] = _gguf_tensor(path, t, shape, notes)
        types[name] = t.tensor_type.name
    meta = {"format": "gguf", "path": path, "notes": notes, "source_types": types, "reader": reader}
    return args, weights, meta

"""Load weights from an HF safetensors directory or a GGUF file into GPU-layout PackedWeights, or
(stream=True) LazyWeights that read and pack each tensor only when it is uploaded (lazy.py).

Keys of the returned dict are the Program's weight value names (gguf_names.py). Matrices keep
the dtypes of vkdecode/quant/registry.py as stored (repacked to 32-bit words, quant/blocks.py);
bf16 becomes f32; MXFP4 stays mxfp4 but where a block's scale is out of its kernels' range
(f32 then: quant/mxfp4.py); the other IQ* / TQ* types (no kernel) are
dequantized to f32 at load. The notes say where a tensor changed type. Norms and biases are 1-D f32.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os

import gguf
import numpy as np

from vkdecode.errors import ModelError, VkDecodeError
from vkdecode.models import ARCHITECTURES, hf_mxfp4, settings
from vkdecode.models.config import ModelArgs
from vkdecode.models.gguf_names import expected_shapes, is_norm, source_name
from vkdecode.models.gguf_reader import open_gguf
from vkdecode.models.lazy import LazyWeight, read_bytes
from vkdecode.models.moe import hf_sources
from vkdecode.models.safetensors_files import read_header, read_tensor, safetensors_index, tensor_dtype
from vkdecode.quant import (
    DTYPES,
    PackedWeight,
    block_elems,
    mxfp4,
    pack_float,
    pack_gguf_blocks,
    pack_mxfp4_as,
)

# repacked, matmul and embed read them quantized (the quant dtypes of the registry, as GGUF names them)
GGUF_KEPT = tuple(gguf.GGMLQuantizationType(d.gguf_type).name for d in DTYPES.values() if d.quant)
# no native kernel: f32 at load, through gguf's dequantize (listed in the load notes)
GGUF_DEQUANT = ("BF16", "IQ4_XS", "IQ3_S", "IQ3_XXS", "IQ2_S", "IQ2_XS", "IQ2_XXS")
GGUF_DEQUANT += ("IQ1_M", "IQ1_S", "TQ1_0", "TQ2_0", "NVFP4")


def load_weights(path, stream: bool = False) -> tuple[ModelArgs, dict, dict]:
    """-> (args, weights, meta). weights: PackedWeights, all packed now (the tests, the bench and
    the reference reuse them across executors), or with stream=True LazyWeights that read and pack
    each tensor when the memory plan uploads it, keeping no host copy. meta: format, path, notes
    (list[str]), source_types (name -> dtype in the file) and, for GGUF, the open `reader` (the
    tokenizer reuses it)."""
    path = str(path)
    with loading(path):
        if os.path.isdir(path):
            args, weights, meta = _load_hf(path)
        elif not os.path.exists(path):
            raise ModelError(f"{path}: no such file or directory")
        else:
            args, weights, meta = _load_gguf(path)
        if not stream:
            weights = {name: w.packed() for name, w in weights.items()}
        return args, weights, meta


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


def _rows(shape) -> tuple[int, ...]:
    """The shape a weight is packed in: stacked experts (experts, out, in) as their rows, one
    expert's after another (experts * out, in); 1-D and 2-D as they are."""
    return (math.prod(shape[:-1]), shape[-1]) if len(shape) == 3 else tuple(shape)


def _float_dtype(shape: tuple[int, ...], dtype: str) -> str:
    """f16 stays f16 in a matrix of whole word pairs; vectors and odd in-dims go to f32."""
    return "f16" if dtype == "f16" and len(shape) >= 2 and shape[-1] % 2 == 0 else "f32"


def _pack(a: np.ndarray, dtype: str) -> PackedWeight:
    """f32/f16 ndarray -> PackedWeight (the dtype _float_dtype says), stacked experts as rows."""
    a = a.reshape(_rows(a.shape))
    return pack_float(np.ascontiguousarray(a), _float_dtype(a.shape, dtype))


def _lazy(path: str, dtype: str, shape, pack) -> LazyWeight:
    """pack() made when the weight is uploaded, past load_weights: its errors are still the
    loader's, naming the file (loading())."""

    def make() -> PackedWeight:
        with loading(path):
            return pack()

    return LazyWeight(dtype, _rows(shape), make)


# ---------------------------------------------------------------- safetensors


def _load_hf(path: str):
    args = ModelArgs.from_hf_config(path)
    where = safetensors_index(path)
    args = settings.stored_head(args, where)  # transformers 5 keeps a stored lm_head
    _check_layers(path, args, len(where))  # and _check_unused: before reading any data
    arch = ARCHITECTURES[args.arch]
    text = bool(arch.hf_text_prefix) and f"{arch.hf_text_prefix}embed_tokens.weight" in where

    def stored(s: str) -> str:  # the text model of a multimodal checkpoint: "model.x" is "<prefix>x"
        return arch.hf_text_prefix + s[6:] if text and s.startswith("model.") else s

    srcs = {
        n: [stored(s) for s in hf_sources(source_name(n, "hf", args.arch), args.n_experts)]
        for n in expected_shapes(args)
    }
    # the parts the text decode does not read: a multimodal checkpoint's, or a plain one's (Qwen3-Next)
    other = arch.hf_other_parts if text or not arch.hf_text_prefix else ()
    plus_one, views = arch.hf_norms_plus_one, arch.hf_views
    views = views(args) if callable(views) else views  # views that depend on the sizes (qwen35.py)
    views = {n: v for n in srcs if (v := views.get(n.split(".", 2)[-1])) is not None}
    for n, v in [(n, v) for n, v in views.items() if v.if_stored]:
        src = stored(f"model.layers.{n.split('.')[1]}.{v.source}")
        if src in where:
            srcs[n] = [src]
        else:
            del views[n]
    mx = {n: p for n, s in srcs.items() if (p := hf_mxfp4.sources(views.get(n), s, where))}
    used = {s for names in [*srcs.values(), *mx.values()] for s in names}
    _check_unused(path, where, used, ignorable={n for n in where if n.startswith(other)})
    headers: dict[str, dict] = {}
    weights, types, notes = {}, {}, []
    for name, shape in expected_shapes(args).items():
        view = views.get(name)
        if name in mx:  # gpt-oss's MXFP4 experts: mxfp4 on the device
            dtype, pack = hf_mxfp4.weight(mx[name], view, shape, where, notes)
            weights[name], types[name] = _lazy(where[mx[name][0]], dtype, shape, pack), "MXFP4"
            continue
        want = shape[1:] if len(shape) == 3 and not view else shape  # 3-D: one tensor per expert
        want = view.stored(want) if view else want
        tensors = []
        for src in srcs[name]:
            file = where.get(src)
            if file is not None and file not in headers:
                headers[file] = read_header(file)
            if file is None or src not in headers[file]:
                raise ModelError(f"{file or path}: missing tensor {src!r} (expected shape {want})")
            _check_shape(file, src, want, headers[file][src]["shape"])
            tensors.append((file, src, headers[file]))
        types[name] = tensor_dtype(*tensors[0])
        # f16 stays f16 for matrices; the expert biases (2-D, read by moe_bias) are f32 like 1-D ones
        dtype = "f16" if types[name] == "F16" and not name.endswith("_b") else "f32"
        pack = functools.partial(_hf_packed, tensors, dtype, plus_one and is_norm(name), view)
        weights[name] = _lazy(tensors[0][0], _float_dtype(shape, dtype), shape, pack)
    meta = {"format": "safetensors", "path": path, "notes": notes, "source_types": types}
    return args, weights, meta


def _hf_packed(tensors: list[tuple], dtype: str, plus_one: bool, view=None) -> PackedWeight:
    """tensors: (file, name, header) of the weight, or of each expert's part (stacked); view: the
    architecture's HfView it is read through, if any."""
    parts = [read_tensor(*t) for t in tensors]
    a = np.stack(parts) if len(parts) > 1 else parts[0]
    if view is not None:
        a = view.view(a)
    if plus_one:
        # Gemma's RMSNorm computes x * (1 + w) in f32; fold the 1 in once (llama.cpp's
        # converter does the same, so GGUF gemma3 norms already hold 1 + w)
        a = a.astype(np.float32) + np.float32(1.0)
    return _pack(a, dtype)


# ---------------------------------------------------------------- GGUF


def _gguf_tensor(path: str, t, shape, notes: list[str], byte_order: str = "I") -> LazyWeight:
    """t: the reader's tensor. Its dtype on the device is decided here, from its type and shape;
    its bytes are read at packing (the returned weight keeps offsets, not the reader's mapping).
    byte_order: the reader's ("S": a byte-swapped file, whose floats numpy swaps back)."""
    kind = t.tensor_type.name
    # The reader reports ne order (innermost first); the logical shape is the reverse.
    actual = tuple(int(d) for d in reversed(t.shape.tolist()))
    if len(shape) == 2 and shape[0] == 1 and actual == tuple(shape[1:]):
        actual = tuple(shape)  # a one-row matrix stored as a vector (qwen2moe's shared-expert gate)
    _check_shape(path, t.name, shape, actual)
    read = functools.partial(read_bytes, path, int(t.data_offset), int(t.n_bytes))
    dtype = kind.lower()
    if kind in ("F32", "F16"):
        np_dt = np.dtype(np.float32 if kind == "F32" else np.float16).newbyteorder(byte_order)
        pack = lambda: _pack(read().view(np_dt).reshape(shape), dtype)
        return _lazy(path, _float_dtype(shape, dtype), shape, pack)
    fits = len(shape) >= 2 and kind in GGUF_KEPT and shape[-1] % block_elems(dtype) == 0
    if kind == "MXFP4" and fits:
        dtype = mxfp4.load_dtype(_chunks(path, int(t.data_offset), int(t.n_bytes)))
        if dtype != "mxfp4":
            notes.append(f"{t.name}: {mxfp4.NOTE_F32}")
        return _lazy(path, dtype, shape, lambda: pack_mxfp4_as(read(), dtype, _rows(shape)))
    if fits:
        return _lazy(path, dtype, shape, lambda: pack_gguf_blocks(read(), dtype, _rows(shape)))
    if kind in GGUF_KEPT or kind in GGUF_DEQUANT:
        if kind != "BF16":
            why = "no native kernel" if kind in GGUF_DEQUANT else f"shape {shape} does not fit its blocks"
            notes.append(f"{t.name}: {kind} dequantized to f32 at load ({why})")
        qtype = t.tensor_type
        pack = lambda: _pack(gguf.quants.dequantize(read(), qtype).reshape(shape), "f32")
        return _lazy(path, "f32", shape, pack)
    raise ModelError(
        f"{path}: tensor {t.name!r} has type {kind}, which is not supported "
        f"(supported: F32, F16, {', '.join(GGUF_KEPT + GGUF_DEQUANT)})"
    )


def _gguf_viewed(path: str, t, shape, view, notes: list[str], byte_order: str) -> LazyWeight:
    """A weight read through its architecture's GgufView: rows picked from the stored tensor's
    (kept quantized where no view follows and the rows are whole blocks), else as f32 (or f16)."""
    kind = t.tensor_type.name
    actual = tuple(int(d) for d in reversed(t.shape.tolist()))
    _check_shape(path, t.name, view.stored, actual)
    read = functools.partial(read_bytes, path, int(t.data_offset), int(t.n_bytes))
    rows = slice(None) if view.rows is None else view.rows
    blocks = kind in GGUF_KEPT and kind != "MXFP4" and len(shape) == 2
    if view.view is None and blocks and shape[-1] % block_elems(kind.lower()) == 0:
        dtype = kind.lower()
        pack = lambda: pack_gguf_blocks(read().reshape(actual[0], -1)[rows], dtype, _rows(shape))
        return _lazy(path, dtype, shape, pack)
    if kind not in ("F32", "F16") + GGUF_KEPT + GGUF_DEQUANT:
        raise ModelError(f"{path}: tensor {t.name!r} has type {kind}, which is not supported here")
    if kind not in ("F32", "F16", "BF16"):
        notes.append(f"{t.name}: {kind} dequantized to f32 at load (its layout is undone there)")

    def floats() -> np.ndarray:
        if kind in ("F32", "F16"):
            np_dt = np.dtype(np.float32 if kind == "F32" else np.float16).newbyteorder(byte_order)
            a = read().view(np_dt).reshape(actual)
        else:
            a = gguf.quants.dequantize(read(), t.tensor_type).reshape(actual)
        a = a[rows]
        return (a if view.view is None else view.view(a.astype(np.float32))).reshape(shape)

    dtype = "f16" if kind == "F16" and view.view is None else "f32"
    return _lazy(path, _float_dtype(shape, dtype), shape, lambda: _pack(floats(), dtype))


def _chunks(path: str, offset: int, nbytes: int):
    """An MXFP4 tensor's bytes in 68 MiB chunks of whole blocks: its dtype is decided before the
    weight is packed (the memory plan sizes it first), so mxfp4.load_dtype reads it once more."""
    step = mxfp4.BLOCK_BYTES << 22
    return (read_bytes(path, offset + i, min(step, nbytes - i)) for i in range(0, nbytes, step))


def _load_gguf(path: str):
    reader = open_gguf(path)
    args = ModelArgs.from_gguf(reader, path)
    tensors = {t.name: t for t in reader.tensors}
    _check_layers(path, args, len(tensors))
    spec = ARCHITECTURES[args.arch]
    # layers past n_layers: Qwen3.5's multi-token prediction heads, which llama.cpp's decode step
    # does not run either (the architecture's gguf_fields left them out of n_layers)
    total = int(reader.fields[f"{spec.gguf_name or spec.name}.block_count"].contents())
    extra = tuple(n for n in tensors if any(n.startswith(f"blk.{i}.") for i in range(args.n_layers, total)))
    # rope_freqs.weight is read into args.rope_freq_factors (config_rope.gguf_rope_factors)
    _check_unused(
        path,
        tensors,
        {source_name(n, "gguf", args.arch) for n in expected_shapes(args)},
        ignorable=("rope_freqs.weight", *extra),
    )
    weights, types, notes = {}, {}, []
    views = spec.gguf_views(args) if spec.gguf_views else {}
    for name, shape in expected_shapes(args).items():
        src = source_name(name, "gguf", args.arch)
        t = tensors.get(src)
        if t is None:
            raise ModelError(f"{path}: missing tensor {src!r} (expected shape {shape})")
        view = views.get(name.split(".", 2)[-1]) if name.startswith("layers.") else None
        if view is not None:
            weights[name] = _gguf_viewed(path, t, shape, view, notes, reader.byte_order)
        else:
            weights[name] = _gguf_tensor(path, t, shape, notes, reader.byte_order)
        types[name] = t.tensor_type.name
    meta = {"format": "gguf", "path": path, "notes": notes, "source_types": types, "reader": reader}
    return args, weights, meta

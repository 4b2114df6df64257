"""MXFP4 experts of HF checkpoints (gpt-oss as OpenAI ships it, quantization_config mxfp4): each
projection is `{name}_blocks` [experts, out, in / 32, 16] and `{name}_scales` [experts, out, in / 32],
output-major, with element 2j of a block in byte j's low nibble and 2j + 1 in its high one, and the
value FP4[idx] * 2^(scale - 127) (transformers' integrations/mxfp4.py). FP4 is ggml's KVALUES halved,
so a block is ggml's MXFP4 block with e = scale and the nibbles reordered: it then loads as mxfp4
through quant/mxfp4.py (f32 where a block's scale is out of the mxfp4 kernels' range).
"""

from __future__ import annotations

import numpy as np

from vkdecode.errors import ModelError
from vkdecode.models.safetensors_files import read_header, read_u8
from vkdecode.quant import mxfp4
from vkdecode.quant.blocks import pack_mxfp4_as


def sources(view, srcs: list[str], where: dict) -> tuple[str, str] | None:
    """(blocks, scales) tensor names when the checkpoint stores this view's source as MXFP4."""
    if view is None or view.mxfp4 is None or len(srcs) != 1:
        return None
    pair = (srcs[0] + "_blocks", srcs[0] + "_scales")
    return pair if all(n in where for n in pair) else None


def to_gguf_blocks(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """HF blocks [..., G, 16] and scales [..., G] -> ggml MXFP4 bytes [..., G, 17]."""
    idx = np.empty((*blocks.shape[:-1], 32), np.uint8)
    idx[..., 0::2], idx[..., 1::2] = blocks & 0xF, blocks >> 4
    out = np.empty((*blocks.shape[:-1], mxfp4.BLOCK_BYTES), np.uint8)
    out[..., 0] = scales
    out[..., 1:] = idx[..., :16] | (idx[..., 16:] << 4)  # ggml: element j low, j + 16 high
    return out


def weight(pair: tuple[str, str], view, shape: tuple[int, ...], where: dict, notes: list[str]):
    """-> (dtype, pack()) of the program weight `shape` (experts, out, in), its rows every
    view.mxfp4 = (step, start) of the stored ones (gpt-oss: gate and up interleaved)."""
    (bn, sn), (bf, sf) = pair, (where[pair[0]], where[pair[1]])
    heads = {bn: read_header(bf), sn: read_header(sf)}
    (e, out, n_in), (step, start) = shape, view.mxfp4
    want = {bn: (e, out * step, n_in // 32, 16), sn: (e, out * step, n_in // 32)}
    for name, file in ((bn, bf), (sn, sf)):
        if tuple(heads[name][name]["shape"]) != want[name] or n_in % 32:
            raise ModelError(
                f"{file}: tensor {name!r} has shape {tuple(heads[name][name]['shape'])}, expected {want[name]}"
            )

    def rows(name: str, file: str) -> np.ndarray:
        return read_u8(file, name, heads[name])[:, start::step]

    def raw() -> np.ndarray:
        return to_gguf_blocks(rows(bn, bf), rows(sn, sf)).reshape(e * out, -1)

    # the scales alone (one byte per 32 weights) decide, unless some are out of the kernels' range
    dtype = "mxfp4" if mxfp4.in_kernel_range(rows(sn, sf)) else mxfp4.load_dtype([raw()])
    if dtype != "mxfp4":
        notes.append(f"{bn}: {mxfp4.NOTE_F32}")
    return dtype, lambda: pack_mxfp4_as(raw(), dtype, (e * out, n_in))

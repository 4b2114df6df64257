"""Weight dtypes: the registry (registry.py: one record per dtype, every dtype list derived from
it), the GPU word layout and packing (blocks.py; kquant.py for the split K-quant / q5_1 / iq4_nl
blocks; mxfp4.py for MXFP4's E8M0 scales and e2m1 codes)."""

from __future__ import annotations

from vkdecode.quant.blocks import (  # noqa: F401
    PackedWeight,
    dequantize,
    pack_float,
    pack_gguf_blocks,
    pack_mxfp4_as,
    quantize,
)
from vkdecode.quant.registry import (  # noqa: F401 (the names importers use)
    BLOCK,
    DTYPES,
    FLOAT_TYPES,
    GGUF_BLOCK_BYTES,
    IDOT_TYPES,
    K_TYPES,
    KSPLIT_TYPES,
    QUANT_TYPES,
    SPLIT_TYPES,
    UNIT_DTYPES,
    WEIGHT_DTYPES,
    WORDS_PER_BLOCK,
    DType,
    block_elems,
    row_words,
)

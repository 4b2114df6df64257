"""The one registry of weight dtypes: a record per dtype, and every dtype list vkdecode uses derived
from it (fusion/ir.py's WEIGHT_DTYPES, which may not import vkdecode, is checked against it by
tests/quant/test_registry.py).

Every dtype runs in every weight kernel (embed, matvec, chunk matmul, tensor-core tiles) through
shaders/dequant.glsl's element decode; the capability flags name the faster paths a dtype also has.
Registry order is the order users see (GGUF type lists, `--quant` choices): floats, then by size.
"""

from __future__ import annotations

from dataclasses import dataclass

from vkdecode.quant import kquant

BLOCK = 32  # elements per block of the block32 family (q8_0 .. iq4_nl)


@dataclass(frozen=True)
class DType:
    name: str
    gguf_type: int  # gguf.GGMLQuantizationType value
    family: str  # "float" | "block32" (32-element blocks) | "kquant" (256-element superblocks)
    block: int  # elements per block (1 for floats)
    block_bytes: int  # GGUF bytes per block
    q_words: int = 0  # quant dtypes: 32-bit words per block of part "q" (the quants)
    s_words: int = 0  # and of part "s" (the scales)
    split: bool = False  # kquant.py's byte split of the GGUF block (else blocks.py's repack)
    slot: int = -1  # quant dtypes: the code fused_wslot.glsl's DTS_<slot> define carries
    # the chunk matmul decodes 32-element units (dequant.glsl unit_weights); the others go element
    # by element (dequant_elem: correct for every dtype, only slower)
    units: bool = False
    ksplit: bool = False  # wide units split into halves (shaders/kwide_rows.glsl; lowering kw_split)
    idot: bool = False  # split wide units on integer dot products (dequant.glsl KQ_IDOT, KQ_IDOT_Q6)
    fallback: str = ""  # llama.cpp's type for rows that are no whole number of superblocks
    # part "s" as bytes, not words: s_bytes a block, a row's bytes padded to whole words (mxfp4's
    # one E8M0 byte a block: a word each would add 3 bytes to its 17)
    s_bytes: int = 0

    @property
    def quant(self) -> bool:
        return self.family != "float"

    @property
    def bits(self) -> float:
        """Bits a weight in the file (the device layout adds q6_k's / q3_k's 2-byte pad)."""
        return 8 * self.block_bytes / self.block


def _split(name: str, gguf_type: int, family: str, **kw) -> DType:
    """A dtype kept as kquant.LAYOUTS' split of its GGUF block (its sizes come from there)."""
    n, nbytes = kquant.LAYOUTS[name][:2]
    _, qw, sw = kquant.block_words(name)
    return DType(name, gguf_type, family, n, nbytes, qw, sw, split=True, **kw)


DTYPES = {
    d.name: d
    for d in (
        DType("f32", 0, "float", 1, 4, units=True),
        DType("f16", 1, "float", 1, 2, units=True),
        DType("q8_0", 8, "block32", BLOCK, 34, 8, 1, slot=0, units=True),
        DType("q4_0", 2, "block32", BLOCK, 18, 4, 1, slot=1, units=True),
        DType("q4_1", 3, "block32", BLOCK, 20, 4, 1, slot=2, units=True),
        DType("q5_0", 6, "block32", BLOCK, 22, 5, 1, slot=3, units=True),
        _split("q5_1", 7, "block32", slot=9),
        _split("iq4_nl", 20, "block32", slot=10),
        DType("mxfp4", 39, "block32", BLOCK, 17, 4, slot=11, units=True, s_bytes=1),
        _split("q2_k", 10, "kquant", slot=7, fallback="iq4_nl"),
        _split("q3_k", 11, "kquant", slot=8, fallback="iq4_nl"),
        _split("q4_k", 12, "kquant", slot=4, ksplit=True, idot=True, fallback="q5_0"),
        _split("q5_k", 13, "kquant", slot=5, fallback="q5_1"),
        _split("q6_k", 14, "kquant", slot=6, ksplit=True, idot=True, fallback="q8_0"),
    )
}

WEIGHT_DTYPES = tuple(DTYPES)
FLOAT_TYPES = tuple(n for n, d in DTYPES.items() if not d.quant)
# quant dtypes (weights bound as "q" + "s" parts) in slot order: a DTS_ code is an index here
QUANT_TYPES = tuple(sorted((n for n, d in DTYPES.items() if d.quant), key=lambda n: DTYPES[n].slot))
K_TYPES = tuple(n for n, d in DTYPES.items() if d.family == "kquant")  # also: wide 32-element matvec units
SPLIT_TYPES = tuple(n for n, d in DTYPES.items() if d.split)
UNIT_DTYPES = tuple(n for n, d in DTYPES.items() if d.units)
KSPLIT_TYPES = tuple(n for n, d in DTYPES.items() if d.ksplit)
IDOT_TYPES = tuple(n for n, d in DTYPES.items() if d.idot)
WORDS_PER_BLOCK = {n: d.q_words for n, d in DTYPES.items() if d.quant and not d.split}
GGUF_BLOCK_BYTES = {n: d.block_bytes for n, d in DTYPES.items() if d.quant and not d.split}


def block_elems(dtype: str) -> int:
    """Elements per block of a quant dtype (the in-dim must be a multiple of it)."""
    return kquant.QK if dtype in K_TYPES else BLOCK


def row_words(dtype: str, n_in: int, part: str) -> int:
    """32-bit words per row of part "q" or "s" of a quant dtype."""
    d = DTYPES[dtype]
    if part == "s" and d.s_bytes:
        return -(-n_in // d.block * d.s_bytes // 4)
    return n_in // d.block * (d.q_words if part == "q" else d.s_words)

"""vkdecode/quant/registry.py: the one list of weight dtypes, checked against what is typed
elsewhere on purpose (fusion may not import vkdecode; GGUF's own type table)."""

import gguf

from fusion.ir import K_QUANT_BLOCK, QUANT_BLOCK, WEIGHT_DTYPES
from vkdecode.quant import DTYPES, QUANT_TYPES, kquant, row_words


def test_fusion_weight_dtypes_are_the_registry():
    assert sorted(WEIGHT_DTYPES) == sorted(DTYPES) and len(set(WEIGHT_DTYPES)) == len(WEIGHT_DTYPES)
    for name, d in DTYPES.items():  # fusion/verify.py's in-dim rule for quant weights
        if d.quant:
            assert d.block == (K_QUANT_BLOCK if name.endswith("_k") else QUANT_BLOCK)


def test_gguf_types_and_sizes():
    for name, d in DTYPES.items():
        t = gguf.GGMLQuantizationType(d.gguf_type)
        assert t.name.lower() == name and gguf.GGML_QUANT_SIZES[t] == (d.block, d.block_bytes)


def test_layout_and_slots():
    assert sorted(DTYPES[n].slot for n in QUANT_TYPES) == list(range(len(QUANT_TYPES)))
    assert {n for n, d in DTYPES.items() if d.split} == set(kquant.LAYOUTS)
    for name in QUANT_TYPES:  # a block's device words hold its file bytes, at most a 2-byte pad more
        d = DTYPES[name]  # (over 4 blocks: mxfp4's scale bytes share words)
        words = row_words(name, 4 * d.block, "q") + row_words(name, 4 * d.block, "s")
        assert 4 * d.block_bytes <= 4 * words <= 4 * (d.block_bytes + 2)
        assert row_words(name, 5 * d.block, "s") * 4 >= 5 * (d.s_bytes or 4 * d.s_words)  # pad: up
        assert not d.fallback or (DTYPES[d.fallback].block == 32 and d.family == "kquant")

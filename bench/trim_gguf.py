"""A GGUF cut down to fit the device machine's carry limit (64 MiB a call): its first N layers and
first V vocabulary entries (token embedding rows, and the tokenizer's tokens, scores and types),
every other field and tensor as it is, bytes copied, never requantized. The result is a smaller
model with the real model's weights, for checking a kernel path on real activations (bench/
coop_check.py); its outputs are not the full model's.

    python -m bench.trim_gguf gemma-3-270m-q4_k_m.gguf /tmp/gemma-12l.gguf --layers 12 --vocab 8192
"""

from __future__ import annotations

import argparse
import os
import re

import gguf
import numpy as np

VOCAB_FIELDS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
SKIP_FIELDS = ("GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture")


def _field_value(field):
    """(python value, GGUFValueType, sub type) of a reader field."""
    types = field.types
    if types[0] == gguf.GGUFValueType.ARRAY:
        sub = types[-1]
        if sub == gguf.GGUFValueType.STRING:
            vals = [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
        else:
            vals = [field.parts[i].tolist()[0] for i in field.data]
        return vals, types[0], sub
    if types[0] == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace"), types[0], None
    return field.parts[field.data[0]].tolist()[0], types[0], None


def trim(src: str, dst: str, layers: int, vocab: int) -> None:
    r = gguf.GGUFReader(src)
    arch = _field_value(r.fields["general.architecture"])[0]
    w = gguf.GGUFWriter(dst + ".tmp", arch)
    for name, field in r.fields.items():
        if name in SKIP_FIELDS:
            continue
        value, vtype, sub = _field_value(field)
        if name == f"{arch}.block_count":
            value = layers
        if name == f"{arch}.vocab_size":
            value = min(vocab, value)
        if name in VOCAB_FIELDS:
            value = value[:vocab]
        if vtype == gguf.GGUFValueType.ARRAY:
            w.add_key_value(name, value, vtype, sub_type=sub)
        else:
            w.add_key_value(name, value, vtype)
    for t in r.tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        if m and int(m.group(1)) >= layers:
            continue
        data = np.asarray(t.data)  # rows first; a quantized tensor's rows as bytes
        if t.name in ("token_embd.weight", "output.weight"):
            data = data[:vocab]
        w.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(dst + ".tmp", dst)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    a = ap.parse_args()
    trim(a.src, a.dst, a.layers, a.vocab)
    print(f"{a.dst}: {os.path.getsize(a.dst) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()

"""A GGUF file of random weights in a real model's shape (vkdecode/bench_shapes.py), with a byte-level
tokenizer and a ChatML template, for benches that go through the whole loader, tokenizer and chat
path (`vkdecode serve`) on machines where the real model file cannot be carried.

Tokenizer: the 256 byte tokens of GPT-2's byte-level BPE, the ChatML specials, and the rest of the
vocabulary as control tokens "<|tN|>". Every control token decodes to its own text and encodes back
to itself, so a random model's reply re-tokenizes (in the next chat turn) to the ids it generated,
as a real model's reply does; only a stray non-ASCII byte token does not round-trip. Text prompts
cost one token per byte (no merges).

    python -m bench.shape_gguf --shape smollm2-135m --quant q4_1 out.gguf
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # run from anywhere

from vkdecode.bench_shapes import STD, shape_args, weight_dtypes
from vkdecode.models.gguf_names import expected_shapes, source_name

# ChatML (vkdecode.models.tokenizer no longer exports a default template since --chat without one
# became an error)
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\n' }}{% endif %}")

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QUANTS = ("f16", "q8_0", "q4_0", "q4_1")


def byte_unicode() -> list[str]:
    """GPT-2's byte -> printable character table (what byte-level BPE vocabularies spell bytes with)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def vocabulary(n: int) -> tuple[list[str], list[int]]:
    """-> tokens, token types (1 normal, 3 control). "ab" is the one merge (the loader wants a list)."""
    tokens = byte_unicode() + SPECIALS + ["ab"]
    types = [1] * 256 + [3] * len(SPECIALS) + [1]
    tokens += [f"<|t{i}|>" for i in range(len(tokens), n)]
    return tokens, types + [3] * (n - len(types))


def random_block_bytes(dtype: str, rows: int, cols: int, rng) -> np.ndarray:
    """GGUF bytes [rows, blocks * block_bytes] of random quantized blocks with small scales."""
    nb = cols // 32
    if dtype == "q8_0":
        blk = np.zeros((rows, nb), [("d", "<f2"), ("q", "i1", 32)])
        blk["q"] = rng.integers(-127, 128, (rows, nb, 32), dtype=np.int8)
        blk["d"] = STD / 74.0
    elif dtype in ("q4_0", "q4_1"):
        fields = [("d", "<f2"), ("m", "<f2")] if dtype == "q4_1" else [("d", "<f2")]
        blk = np.zeros((rows, nb), fields + [("q", "u1", 16)])
        blk["q"] = rng.integers(0, 256, (rows, nb, 16), dtype=np.uint8)
        blk["d"] = STD / 4.6
        if dtype == "q4_1":
            blk["m"] = -8 * STD / 4.6       # centres the unsigned nibbles on zero
    else:
        raise ValueError(f"no random GGUF blocks for {dtype!r}")
    return blk.view(np.uint8).reshape(rows, -1)


def write_shape_gguf(path: str, shape: str, quant: str, seed: int = 0, max_position: int = 8192) -> str:
    import gguf
    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r}: choose from {', '.join(QUANTS)}")
    args = shape_args(shape, max_position)
    dtypes = weight_dtypes(args, quant)
    rng = np.random.default_rng(seed)
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, args.arch)
    w.add_block_count(args.n_layers)
    w.add_context_length(args.max_position)
    w.add_embedding_length(args.hidden_size)
    w.add_feed_forward_length(args.intermediate_size)
    w.add_head_count(args.n_heads)
    w.add_head_count_kv(args.n_kv_heads)
    w.add_key_length(args.head_dim)
    w.add_value_length(args.head_dim)
    w.add_rope_freq_base(args.rope_theta)
    w.add_layer_norm_rms_eps(args.rms_eps)
    w.add_vocab_size(args.vocab_size)
    tokens, types = vocabulary(args.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(["a b"])
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_chat_template(CHATML)
    for name, shp in expected_shapes(args).items():
        gname = source_name(name, "gguf")
        if len(shp) == 1:
            w.add_tensor(gname, (1.0 + 0.1 * rng.standard_normal(shp)).astype(np.float32))
        elif dtypes[name] == "f16":
            w.add_tensor(gname, (STD * rng.standard_normal(shp)).astype(np.float16))
        else:
            qt = gguf.GGMLQuantizationType[dtypes[name].upper()]
            w.add_tensor(gname, random_block_bytes(dtypes[name], *shp, rng), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--quant", default="q4_1", choices=QUANTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("out")
    a = ap.parse_args(argv)
    print(write_shape_gguf(a.out, a.shape, a.quant, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())

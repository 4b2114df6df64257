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
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from vkdecode.benchmark.shapes import STD, random_halves, shape_args, weight_dtypes
from vkdecode.models.gguf_names import expected_shapes, source_name
from vkdecode.models.rope import llama3_rope_factors

# ChatML (vkdecode.models.tokenizer no longer exports a default template since --chat without one
# became an error)
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QUANTS = ("f16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q6_k", "q4_k_m")


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


# GGUF block layouts (packed, little endian) and the f16 scale fields that random_block_bytes sets so
# a weight has std near STD and the unsigned types are centred; every other byte stays random.
BLOCKS = {
    "q8_0": np.dtype([("d", "<f2"), ("q", "i1", 32)]),
    "q4_0": np.dtype([("d", "<f2"), ("q", "u1", 16)]),
    "q4_1": np.dtype([("d", "<f2"), ("m", "<f2"), ("q", "u1", 16)]),
    "q5_0": np.dtype([("d", "<f2"), ("qh", "u1", 4), ("q", "u1", 16)]),
    "q4_k": np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("q", "u1", 128)]),
    "q6_k": np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")]),
}
BLOCK_ELEMS = {"q4_k": 256, "q6_k": 256}  # the others: 32


def random_block_bytes(dtype: str, rows: int, cols: int, rng) -> np.ndarray:
    """GGUF bytes [rows, blocks * block_bytes] of random quantized blocks with small fixed scales.
    The quant bytes come straight from the generator as uint32 words (no float quantizing: an 8B
    Q4_K_M table is written at the generator's speed)."""
    if dtype not in BLOCKS:
        raise ValueError(f"no random GGUF blocks for {dtype!r} (choose from {', '.join(BLOCKS)})")
    bt = BLOCKS[dtype]
    nb = cols // BLOCK_ELEMS.get(dtype, 32)
    total = rows * nb * bt.itemsize
    raw = rng.integers(0, 1 << 32, -(-total // 4), dtype=np.uint32).view(np.uint8)[:total]
    blk = raw.view(bt).reshape(rows, nb)
    if dtype == "q8_0":  # d * q, q std ~74
        blk["d"] = STD / 74.0
    elif dtype in ("q4_0", "q5_0"):  # d * (q - 8) or d * (q - 16): std 4.6 / 9.2
        blk["d"] = STD / (4.6 if dtype == "q4_0" else 9.2)
    elif dtype == "q4_1":  # d * q + m, m = -8 d centres the unsigned nibbles
        blk["d"] = STD / 4.6
        blk["m"] = -8 * STD / 4.6
    elif dtype == "q4_k":  # d * sc * q - dmin * m, 6-bit sc and m, q 0..15: std ~258 d
        blk["d"] = STD / 258  # with dmin = 7.5 d (= mean q) the mean is zero
        blk["dmin"] = 7.5 * STD / 258
    else:  # q6_k: d * sc * (q - 32); sc kept in 0..15 (rms ~9), q - 32 std ~18
        blk["scales"] &= np.int8(0x0F)
        blk["d"] = STD / 9 / 18
    return raw.reshape(rows, -1)


def _tensors(args, dtypes: dict, rng):
    """(GGUF name, shape, numpy dtype, nbytes, raw GGML type or None, make()) for every tensor, in
    file order; make() draws the data only when the writer reaches it (one tensor in memory)."""
    import gguf

    out = []
    if (args.rope_scaling or {}).get("rope_type") == "llama3":  # llama.cpp's form of the scaling
        factors = llama3_rope_factors(args)
        out.append(("rope_freqs.weight", factors.shape, np.float32, factors.nbytes, None, lambda: factors))
    for name, shp in expected_shapes(args).items():
        gname = source_name(name, "gguf", args.arch)
        if len(shp) == 1:
            out.append(
                (
                    gname,
                    shp,
                    np.float32,
                    4 * shp[0],
                    None,
                    lambda shp=shp: (1.0 + 0.1 * rng.standard_normal(shp)).astype(np.float32),
                )
            )
        elif dtypes[name] == "f16":  # f16 bit patterns, no float64 temporaries (bench_shapes.random_halves)
            out.append(
                (
                    gname,
                    shp,
                    np.float16,
                    2 * shp[0] * shp[1],
                    None,
                    lambda shp=shp: random_halves(rng, shp[0] * shp[1], STD).view(np.float16).reshape(shp),
                )
            )
        else:
            dt = dtypes[name]
            row_bytes = shp[1] // BLOCK_ELEMS.get(dt, 32) * BLOCKS[dt].itemsize if dt in BLOCKS else 0
            if not row_bytes:
                raise ValueError(
                    f"{name}: no random GGUF blocks for {dt!r} (choose from {', '.join(BLOCKS)})"
                )
            out.append(
                (
                    gname,
                    (shp[0], row_bytes),
                    np.uint8,
                    shp[0] * row_bytes,
                    gguf.GGMLQuantizationType[dt.upper()],
                    lambda dt=dt, shp=shp: random_block_bytes(dt, *shp, rng),
                )
            )
    return out


def write_shape_gguf(
    path: str, shape: str, quant: str, seed: int = 0, max_position: int = 8192, n_layers: int = 0
) -> str:
    """Writes the GGUF one tensor at a time (tensor infos first, then each tensor's data as it is
    drawn), so memory stays at one tensor whatever the model's size."""
    import gguf

    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r}: choose from {', '.join(QUANTS)}")
    args = shape_args(shape, max_position, n_layers)
    dtypes = weight_dtypes(args, quant)
    rng = np.random.default_rng(seed)
    tensors = _tensors(args, dtypes, rng)
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
    for gname, shp, npdt, nbytes, raw, _ in tensors:
        w.add_tensor_info(gname, shp, np.dtype(npdt), nbytes, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for *_, make in tensors:
        w.write_tensor_data(make())
    w.close()
    os.replace(tmp, path)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--quant", default="q4_1", choices=QUANTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N layers (0: all)")
    ap.add_argument("out")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    path = write_shape_gguf(a.out, a.shape, a.quant, a.seed, n_layers=a.layers)
    print(f"{path}: {os.path.getsize(path) / 2**30:.2f} GiB in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

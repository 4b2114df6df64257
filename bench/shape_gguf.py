"""A GGUF file of random weights in a real model's shape (vkdecode/bench_shapes.py), with a byte-level
tokenizer and a ChatML template, for benches that go through the whole loader, tokenizer and chat
path (`vkdecode serve`) on machines where the real model file cannot be carried.

Tokenizer: the 256 byte tokens of GPT-2's byte-level BPE, the ChatML specials, and the rest of the
vocabulary as control tokens "<|tN|>". Every control token decodes to its own text and encodes back
to itself, so a random model's reply re-tokenizes (in the next chat turn) to the ids it generated,
as a real model's reply does; only a stray non-ASCII byte token does not round-trip. Text prompts
cost one token per byte (no merges).

    python -m bench.shape_gguf --shape smollm2-135m --quant q4_1 out.gguf
    python -m bench.shape_gguf --shape qwen3-30b-a3b --quant q4_k_m qwen3-30b-a3b-q4_k_m.gguf  # 17.3 GiB
    python -m bench.shape_gguf --shape gpt-oss-20b --quant mxfp4 gpt-oss-20b-mxfp4.gguf  # 11.3 GiB
    python -m bench.shape_gguf --shape qwen3.5-35b-a3b --quant q4_k_m qwen3.5-35b-a3b-q4_k_m.gguf  # 19.7 GiB
"""

from __future__ import annotations

import argparse
import collections
import functools
import math
import os
import sys
import time

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from vkdecode.benchmark.shapes import MXFP4_E, STD, random_halves, shape_args, weight_dtypes
from vkdecode.models import ARCHITECTURES
from vkdecode.models.gguf_names import expected_shapes, source_name
from vkdecode.models.qwen35_gguf import FULL, interval_types
from vkdecode.models.rope import llama3_rope_factors

# ChatML (vkdecode.models.tokenizer no longer exports a default template since --chat without one
# became an error)
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QUANTS = ("f16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q6_k", "q4_k_m", "mxfp4")
# general.file_type of the quants that are llama.cpp file types (q4_k and q6_k alone are not its mixes;
# mxfp4 is its MXFP4_MOE for an MoE model: shapes.weight_dtypes)
FILE_TYPES = {
    **{
        q: int(getattr(gguf.LlamaFileType, "MOSTLY_" + q.upper()))
        for q in ("f16", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k_m")
    },
    "mxfp4": int(gguf.LlamaFileType.MOSTLY_MXFP4_MOE),
}


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
    "q5_1": np.dtype([("d", "<f2"), ("m", "<f2"), ("qh", "u1", 4), ("q", "u1", 16)]),
    "q4_k": np.dtype([("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("q", "u1", 128)]),
    "q5_k": np.dtype(
        [("d", "<f2"), ("dmin", "<f2"), ("scales", "u1", 12), ("qh", "u1", 32), ("q", "u1", 128)]
    ),
    "q6_k": np.dtype([("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16), ("d", "<f2")]),
    "mxfp4": np.dtype([("e", "u1"), ("q", "u1", 16)]),
}
BLOCK_ELEMS = {"q4_k": 256, "q5_k": 256, "q6_k": 256}  # the others: 32


def random_block_bytes(dtype: str, rows: int, cols: int, rng) -> np.ndarray:
    """GGUF bytes [rows, blocks * block_bytes] of random quantized blocks with small fixed scales.
    The quant bytes are the bit generator's raw 64-bit words (no float quantizing, no bounded
    integers: about 6x faster than rng.integers, so a 30B Q4_K_M file is written at disk speed)."""
    if dtype not in BLOCKS:
        raise ValueError(f"no random GGUF blocks for {dtype!r} (choose from {', '.join(BLOCKS)})")
    bt = BLOCKS[dtype]
    nb = cols // BLOCK_ELEMS.get(dtype, 32)
    total = rows * nb * bt.itemsize
    raw = rng.bit_generator.random_raw(-(-total // 8)).view(np.uint8)[:total]
    blk = raw.view(bt).reshape(rows, nb)
    if dtype == "q8_0":  # d * q, q std ~74
        blk["d"] = STD / 74.0
    elif dtype in ("q4_0", "q5_0"):  # d * (q - 8) or d * (q - 16): std 4.6 / 9.2
        blk["d"] = STD / (4.6 if dtype == "q4_0" else 9.2)
    elif dtype in ("q4_1", "q5_1"):  # d * q + m, m = -8 d (-16 d) centres the unsigned quants
        blk["d"] = STD / (4.6 if dtype == "q4_1" else 9.2)
        blk["m"] = -(8 if dtype == "q4_1" else 16) * blk["d"]
    elif dtype in ("q4_k", "q5_k"):  # d * sc * q - dmin * m, 6-bit sc and m: std ~258 d (q in
        std = 258 if dtype == "q4_k" else 527  # 0..15), ~527 d (q in 0..31)
        blk["d"] = STD / std  # with dmin = mean q * d the mean is zero
        blk["dmin"] = (7.5 if dtype == "q4_k" else 15.5) * STD / std
    elif dtype == "q6_k":  # d * sc * (q - 32); sc kept in 0..15 (rms ~9), q - 32 std ~18
        blk["scales"] &= np.int8(0x0F)
        blk["d"] = STD / 9 / 18
    else:  # mxfp4: 2^(e - 128) * table[q], table std ~5.9 (shapes.MXFP4_E)
        blk["e"] = MXFP4_E
    return raw.reshape(rows, -1)


def _draw(dtype: str, shape: tuple, key: tuple) -> np.ndarray:
    """One tensor's data from a generator of its own (key: seed, index), so tensors can be drawn on
    any thread in any order and the file stays the same: norms around 1, f32 (the MoE router) and
    f16 matrices of std STD as bit patterns (shapes.random_halves), quant blocks as random bytes
    with valid scales (stacked experts: their rows)."""
    rng = np.random.default_rng(key)
    if len(shape) == 1:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    if dtype == "f32":
        return (STD * rng.standard_normal(shape)).astype(np.float32)
    if dtype == "f16":
        return random_halves(rng, math.prod(shape), STD).view(np.float16).reshape(shape)
    return random_block_bytes(dtype, math.prod(shape[:-1]), shape[-1], rng).reshape(*shape[:-1], -1)


def _in_file(dtype: str, shape: tuple, key: tuple, stored: tuple, neg_exp: bool) -> np.ndarray:
    """_draw's data of the program's shape in the file's form: its stored shape (a float tensor the
    converter reshaped), ssm_a as -exp of the A_log drawn (qwen35_gguf.a_log reads it back)."""
    a = _draw(dtype, shape, key)
    return (-np.exp(a) if neg_exp else a).reshape(stored)


def _stored(name: str, shp: tuple, views: dict) -> tuple:
    """The tensor's shape in the file: an architecture's GGUF view's (Qwen3.5's attn_q holds q and its
    gate, its ssm_conv1d is (channels, kernel)); a one-row matrix squeezed to a vector, as the
    converter squeezes every tensor (Qwen2-MoE's and Qwen3.5's ffn_gate_inp_shexp)."""
    view = views.get(name.split(".", 2)[-1]) if name.startswith("layers.") else None
    stored = tuple(view.stored) if view else shp
    return stored[1:] if len(stored) == 2 and stored[0] == 1 else stored


def _tensors(args, dtypes: dict, seed: int):
    """(GGUF name, shape, numpy dtype, nbytes, raw GGML type or None, make()) for every tensor, in
    file order; make() draws the data only when the writer asks for it (_draw)."""
    out, written = [], set()
    if (args.rope_scaling or {}).get("rope_type") == "llama3":  # llama.cpp's form of the scaling
        factors = llama3_rope_factors(args)
        out.append(("rope_freqs.weight", factors.shape, np.float32, factors.nbytes, None, lambda: factors))
    arch = ARCHITECTURES[args.arch]
    views = arch.gguf_views(args) if arch.gguf_views else {}
    for i, (name, shp) in enumerate(expected_shapes(args).items()):
        gname = source_name(name, "gguf", args.arch)
        if gname in written:  # one tensor of two program weights (Qwen3.5's attn_q: wq and wgate)
            continue
        written.add(gname)
        stored = _stored(name, shp, views)
        # drawn in the program's shape where the file's is a reshape, so the values are shape_model's;
        # else (attn_q) whole, in the file's
        shp = shp if math.prod(stored) == math.prod(shp) else stored
        dt = dtypes.get(name, "f32")  # vectors and shapes.F32_MATRICES: f32
        if dt in ("f32", "f16"):
            npdt = np.dtype(np.float16 if dt == "f16" else np.float32)
            info = (stored, npdt, npdt.itemsize * math.prod(shp), None)
        else:
            if stored != shp:
                raise ValueError(f"{name}: no random GGUF blocks of a tensor stored as {stored}")
            row_bytes = shp[-1] // BLOCK_ELEMS.get(dt, 32) * BLOCKS[dt].itemsize if dt in BLOCKS else 0
            if not row_bytes:
                raise ValueError(
                    f"{name}: no random GGUF blocks for {dt!r} (choose from {', '.join(BLOCKS)})"
                )
            qt = gguf.GGMLQuantizationType[dt.upper()]
            info = ((*shp[:-1], row_bytes), np.uint8, math.prod(shp[:-1]) * row_bytes, qt)
        make = functools.partial(_in_file, dt, shp, (seed, i), info[0], gname.endswith(".ssm_a"))
        out.append((gname, *info, make))
    return out


def _drawn(tensors, workers: int):
    """Each tensor's data in file order, drawn up to `workers` tensors ahead on a thread pool (numpy's
    generators release the GIL) while the caller writes the one before: a 30B file is written at the
    disk's speed, with about `workers` tensors in memory."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        ahead = collections.deque()
        for *_, make in tensors:
            ahead.append(pool.submit(make))
            if len(ahead) > workers:
                yield ahead.popleft().result()
        while ahead:
            yield ahead.popleft().result()


def add_model_keys(w, args) -> None:
    """args' hyperparameters under the keys llama.cpp's converter writes (models/*.gguf_fields read
    them back); tests/helpers/make_models.write_gguf writes its files' with this too. Llama 3's rope
    scaling is the rope_freqs.weight tensor instead (_tensors)."""
    w.add_block_count(args.n_layers)
    w.add_context_length(args.max_position)
    w.add_embedding_length(args.hidden_size)
    if args.arch != "qwen3_5_moe":  # its converter writes none (no dense MLP, no intermediate_size)
        w.add_feed_forward_length(args.intermediate_size)
    w.add_head_count(args.n_heads)
    w.add_head_count_kv(args.n_kv_heads)
    w.add_key_length(args.head_dim)
    w.add_value_length(args.head_dim)
    w.add_rope_freq_base(args.rope_theta)
    w.add_layer_norm_rms_eps(args.rms_eps)
    w.add_vocab_size(args.vocab_size)
    if args.n_experts:
        w.add_expert_count(args.n_experts)
        w.add_expert_used_count(args.n_experts_used)
        w.add_expert_feed_forward_length(args.expert_ffn)
        if args.shared_expert_ffn:
            w.add_expert_shared_feed_forward_length(args.shared_expert_ffn)
    scaling = args.rope_scaling or {}
    if scaling.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(scaling["factor"])
    if scaling.get("rope_type") == "yarn":  # llama.cpp always truncates the ramp
        if not scaling["truncate"]:
            raise ValueError("a GGUF cannot say yarn truncate = false")
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(scaling["factor"])
        w.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
        if scaling.get("beta_fast", 32.0) != 32.0:  # llama.cpp's defaults otherwise (32 / 1)
            w.add_rope_scaling_yarn_beta_fast(scaling["beta_fast"])
        if scaling.get("beta_slow", 1.0) != 1.0:
            w.add_rope_scaling_yarn_beta_slow(scaling["beta_slow"])
    if args.arch in ("gpt-oss", "gemma3"):  # gpt-oss: even layers slide (set_swa_pattern(2))
        w.add_sliding_window(args.sliding_window)
    if args.arch == "gemma3":
        w.add_sliding_window_pattern([t == "sliding_attention" for t in args.layer_types])
    if args.arch in ("qwen3_5", "qwen3_5_moe"):
        add_qwen35_keys(w, args)


def add_qwen35_keys(w, args) -> None:
    """Qwen3.5's linear attention and partial rotary, as its converter writes them (qwen35_gguf.text_fields
    reads them back). llama.cpp derives the layer types from full_attention_interval alone."""
    hk, hv, dk, dv, kk = args.linear_attn
    interval = next((i + 1 for i, t in enumerate(args.layer_types) if t == FULL), 4)
    if args.layer_types != interval_types(args.n_layers, interval):
        raise ValueError(f"layer types {args.layer_types} are no full_attention_interval's")
    w.add_full_attention_interval(interval)
    w.add_ssm_conv_kernel(kk)
    w.add_ssm_state_size(dk)
    w.add_ssm_group_count(hk)
    w.add_ssm_time_step_rank(hv)
    w.add_ssm_inner_size(hv * dv)
    w.add_rope_dimension_count(args.rotary_dim)
    # llama.cpp requires the MRoPE sections (Qwen3.5's [11, 11, 10] of 32 rotary pairs); text
    # positions are the same in every section, so the split changes nothing
    third = -(-args.rotary_dim // 6)
    w.add_rope_dimension_sections([third, third, args.rotary_dim // 2 - 2 * third, 0])


def write_shape_gguf(
    path: str,
    shape: str,
    quant: str,
    seed: int = 0,
    max_position: int = 8192,
    n_layers: int = 0,
    workers: int = 0,
) -> str:
    """Writes the GGUF one tensor at a time (tensor infos first, then each tensor's data as it is
    drawn, `workers` threads ahead: _drawn; 0: up to 8), so memory stays at a few tensors whatever
    the model's size. max_position: the header's context length, unless the shape names its own."""
    if quant not in QUANTS:
        raise ValueError(f"quant {quant!r}: choose from {', '.join(QUANTS)}")
    args = shape_args(shape, max_position, n_layers)
    dtypes = weight_dtypes(args, quant)
    tensors = _tensors(args, dtypes, seed)
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, ARCHITECTURES[args.arch].gguf_name or args.arch)  # llama.cpp's name
    add_model_keys(w, args)
    if quant in FILE_TYPES and (quant != "mxfp4" or args.n_experts):  # what llama-bench prints
        w.add_file_type(FILE_TYPES[quant])
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
    for data in _drawn(tensors, workers or min(8, os.cpu_count() or 1)):
        w.write_tensor_data(data)
    w.close()
    os.replace(tmp, path)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="smollm2-135m")
    ap.add_argument("--quant", default="q4_1", choices=QUANTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--layers", type=int, default=0, help="keep only the first N layers (0: all)")
    ap.add_argument("--workers", type=int, default=0, help="threads drawing tensors ahead (0: up to 8)")
    ap.add_argument("out")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    path = write_shape_gguf(a.out, a.shape, a.quant, a.seed, n_layers=a.layers, workers=a.workers)
    print(f"{path}: {os.path.getsize(path) / 2**30:.2f} GiB in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

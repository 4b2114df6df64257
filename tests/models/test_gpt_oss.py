"""models/gpt_oss.py's tokenizer defaults: harmony's turn ends stop the generation, <|end|> does not
(its config and weights: tests/models/test_moe.py)."""

from __future__ import annotations

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models

from vkdecode.models.gpt_oss import ARCHITECTURE
from vkdecode.models.tokenizer import Tokenizer

HARMONY_IDS = {"<|endoftext|>": 0, "<|return|>": 1, "<|end|>": 2, "<|call|>": 3, "<|start|>": 4, "x": 5}


def tokenizer(vocab: dict, eos) -> Tokenizer:
    return Tokenizer(HFTokenizer(models.WordLevel(vocab, unk_token="x")), eos_ids=eos)


def test_return_and_call_stop_and_end_does_not():
    # a GGUF naming <|return|> its EOS and <|end|> its end of turn (llama.cpp drops the latter)
    tok = tokenizer(HARMONY_IDS, [1, 2])
    ARCHITECTURE.tokenizer_defaults(tok)
    assert tok.eos_ids == {1, 3}
    tok = tokenizer(HARMONY_IDS, [0, 1, 3])  # the HF files' generation_config: unchanged
    ARCHITECTURE.tokenizer_defaults(tok)
    assert tok.eos_ids == {0, 1, 3}


def test_another_vocabulary_keeps_its_own_ends():
    tok = tokenizer({"<|im_end|>": 0, "<|end|>": 1, "x": 2}, [0, 1])  # the tiny test models' kind
    ARCHITECTURE.tokenizer_defaults(tok)
    assert tok.eos_ids == {0, 1}

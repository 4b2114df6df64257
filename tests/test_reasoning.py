"""reasoning.py: the streaming split of reasoning from the answer (harmony channels, <think>
blocks), fed whole, a character at a time and in random pieces; the format's choice; no GPU."""

from __future__ import annotations

import random

import pytest

from vkdecode.generate import GenerationResponse
from vkdecode.reasoning import (
    CONTENT,
    HEADER_LIMIT,
    REASONING,
    HarmonyParser,
    ThinkParser,
    detect,
    make_parser,
    resolve,
    split_responses,
)

GPT_OSS_PROMPT = "<|start|>user<|message|>What is the capital of France?<|end|><|start|>assistant"
HARMONY = (
    "<|channel|>analysis<|message|>The user asks <b>: capital of France. Answer: Paris.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>The capital of France is **Paris** <|e.g.|>."
)
QWEN3_PROMPT = "<|im_start|>user\nWhat is the capital?<|im_end|>\n<|im_start|>assistant\n"
THINK = "<think>\nThe user wants a capital.\nIt is Paris.\n</think>\n\nThe capital is Paris. </think> <t"


def run(fmt, prompt, pieces) -> tuple[str, str]:
    """(reasoning, content) of the pieces fed one by one, then flushed."""
    p = make_parser(fmt, prompt)
    out = [x for piece in pieces for x in p.feed(piece)] + p.flush()
    assert all(t for _, t in out) and all(c in (REASONING, CONTENT) for c, _ in out)
    return "".join(t for c, t in out if c == REASONING), "".join(t for c, t in out if c == CONTENT)


def random_splits(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, min(40, len(text) - 1))))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]


CASES = [
    ("harmony", GPT_OSS_PROMPT, HARMONY),
    ("think", QWEN3_PROMPT, THINK),
    ("think", QWEN3_PROMPT + "<think>\n", THINK.removeprefix("<think>\n")),
]


@pytest.mark.parametrize("fmt,prompt,text", CASES)
def test_any_split_of_the_text_gives_the_same_result(fmt, prompt, text):
    whole = run(fmt, prompt, [text])
    assert run(fmt, prompt, list(text)) == whole  # every byte boundary
    rng = random.Random(35)
    for _ in range(300):
        assert run(fmt, prompt, random_splits(text, rng)) == whole


def test_harmony_splits_analysis_from_final():
    assert run("harmony", GPT_OSS_PROMPT, [HARMONY]) == (
        "The user asks <b>: capital of France. Answer: Paris.",
        "The capital of France is **Paris** <|e.g.|>.",
    )
    # the markers as tokens (one delta each), as the tokenizer streams them
    tokens = ["<|channel|>", "analysis", "<|message|>", "Hmm", "<|end|>", "<|start|>", "assistant"]
    tokens += ["<|channel|>", "final", "<|message|>", "Paris", "."]
    assert run("harmony", GPT_OSS_PROMPT, tokens) == ("Hmm", "Paris.")


def test_harmony_missing_final_channel_and_tool_calls_stay_out_of_the_content():
    assert run("harmony", GPT_OSS_PROMPT, ["<|channel|>analysis<|message|>Let me think"]) == (
        "Let me think",
        "",
    )
    # ends at <|start|>assistant (max_tokens): the header is structure, not text
    assert run("harmony", GPT_OSS_PROMPT, ["<|channel|>analysis<|message|>a<|end|><|start|>assistant"]) == (
        "a",
        "",
    )
    # a tool call on the commentary channel (<|call|> ends the generation: never in the text)
    call = (
        "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
    )
    assert run("harmony", GPT_OSS_PROMPT, [call]) == ('Need weather.{"city":"Paris"}', "")
    # the recipient before the channel; a template that opened the final channel in the prompt
    assert run(
        "harmony", GPT_OSS_PROMPT + " to=functions.f<|channel|>commentary json", ["<|message|>{}"]
    ) == (
        "{}",
        "",
    )
    assert run("harmony", GPT_OSS_PROMPT + "<|channel|>final<|message|>", ["Paris"]) == ("", "Paris")


def test_harmony_holds_only_a_partial_marker():
    p = HarmonyParser(GPT_OSS_PROMPT)
    assert p.feed("<|channel|>final<|message|>Paris <|e") == [(CONTENT, "Paris ")]
    assert p.held == "<|e"
    assert p.feed("nd|>") == [] and p.feed("<|start|>assistant<|channel|>analysis<|message|>x") == [
        (REASONING, "x")
    ]
    # after every character of the sample, what is not out yet is a marker's beginning at most
    p, out = HarmonyParser(GPT_OSS_PROMPT), []
    for i, c in enumerate(HARMONY):
        out += p.feed(c)
        if p.body is not None:
            assert len(p.held) < len("<|message|>"), HARMONY[: i + 1]


def test_output_that_is_not_harmony_comes_out_as_content():
    assert run("harmony", GPT_OSS_PROMPT, ["Paris", "."]) == ("", "Paris.")
    # a long one is not held to the end: past HEADER_LIMIT characters it streams
    p = HarmonyParser(GPT_OSS_PROMPT)
    text = "word " * (HEADER_LIMIT // 5 + 2)
    assert "".join(t for _, t in p.feed(text)) == text
    assert p.feed("more") == [(CONTENT, "more")]
    # a raw prompt (no <|start|> in it) with the harmony parser asked for
    assert run("harmony", "Once upon a time", [" there", " was"]) == ("", " there was")


def test_think_blocks():
    assert run("think", QWEN3_PROMPT, [THINK]) == (
        "The user wants a capital.\nIt is Paris.\n",
        "The capital is Paris. </think> <t",  # a later tag is text; whitespace after </think> dropped
    )
    # the template opened the block (Qwen3 thinking, DeepSeek-R1): the output starts inside it
    assert run("think", QWEN3_PROMPT + "<think>\n", ["Hmm.</think>Paris"]) == ("Hmm.", "Paris")
    # it never closes: reasoning to the end
    assert run("think", QWEN3_PROMPT + "<think>", ["Hmm, ", "let me see <", "/thi"]) == (
        "Hmm, let me see </thi",
        "",
    )
    # no think block (Qwen3 with thinking off: <think></think> in the prompt): all of it the answer
    assert run("think", QWEN3_PROMPT + "<think>\n\n</think>\n\n", ["Paris <think>"]) == ("", "Paris <think>")
    assert run("think", QWEN3_PROMPT, ["<thin", "king>"]) == ("", "<thinking>")


def test_think_streams_the_answer_without_holding():
    p = ThinkParser(QWEN3_PROMPT)
    assert p.feed("<thi") == [] and p.held == "<thi"
    assert p.feed("nk>\nfine <") == [(REASONING, "fine ")] and p.held == "<"
    assert p.feed("/think>a <") == [(CONTENT, "a <")] and p.held == ""  # the answer has no markers


def test_detect_and_resolve():
    class Vocab:
        def __init__(self, *names):
            self.names = names

        def token_to_id(self, name):
            return self.names.index(name) if name in self.names else None

    class Tok:
        def __init__(self, template="", names=()):
            self.chat_template, self.tok = template, Vocab(*names)

    assert detect("gpt-oss", Tok()) == "harmony"
    assert detect("llama", Tok("{{ '<|start|>assistant<|channel|>final<|message|>' }}")) == "harmony"
    assert detect("qwen3", Tok("{{ '<think>\n' }}")) == "think"
    assert detect("qwen3", Tok("", ("<think>", "</think>"))) == "think"
    assert detect("qwen3", Tok("", ("<think>",))) is None
    assert detect("llama", Tok("<|im_start|>")) is None
    assert resolve("auto", "think") == "think" and resolve("auto", None) is None
    assert resolve("none", "harmony") is None and resolve(None, "harmony") is None
    assert resolve("harmony", None) == "harmony"
    with pytest.raises(ValueError, match="auto, none, harmony, think"):
        resolve("deepseek", None)
    assert make_parser(None) is None


def test_split_responses_keeps_the_raw_text_and_flushes_at_the_end():
    texts = ["<|channel|>analysis<|message|>a", "b<|e", "nd|><|start|>assistant<|channel|>final<|message|>c<"]
    rs = [GenerationResponse(t, i, None) for i, t in enumerate(texts)]
    rs[-1].finish_reason = "length"
    out = list(split_responses(rs, make_parser("harmony", GPT_OSS_PROMPT)))
    assert [r.text for r in out] == texts
    assert [r.reasoning for r in out] == ["a", "b", ""]
    assert [r.content for r in out] == ["", "", "c<"]  # the held "<" comes out with the last
    assert GenerationResponse("x", 1, None).content == "x"  # no parser: the content is the text

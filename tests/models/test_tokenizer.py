"""tokenizer.py: tokenizer.json and GGUF vocabularies, chat templates, streaming detokenization."""

import datetime
import json
import shutil

import gguf
import pytest

from tests.helpers.make_models import (
    TEXT,
    TOKENIZER_STYLES,
    load_smollm2,
    tiny_hf_model,
    write_gguf,
    write_tokenizer_style,
)
from vkdecode.errors import ModelError
from vkdecode.models.tokenizer import Tokenizer
from vkdecode.models.weights import open_gguf

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi 12 東京"}]


@pytest.fixture(scope="module")
def hf_tok(models_dir):
    return Tokenizer.from_hf_dir(str(tiny_hf_model("llama", models_dir)))


def test_hf_tokenizer(hf_tok):
    for t in TEXT:
        assert hf_tok.decode(hf_tok.encode(t)) == t
    ids = hf_tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == hf_tok.tok.token_to_id("<|im_start|>") and ids[-1] == hf_tok.tok.token_to_id(
        "<|im_end|>"
    )
    assert hf_tok.eos_ids == {hf_tok.tok.token_to_id("<|im_end|>")}


def test_gguf_byte_level_bpe_matches_tokenizer_json(models_dir, hf_tok):
    g = write_gguf(tiny_hf_model("llama", models_dir), models_dir / "tok-gpt2.gguf", "f16", pre="gpt2")
    tok = Tokenizer.from_gguf(open_gguf(str(g)), str(g))
    chat = hf_tok.apply_chat_template(CHAT)
    for t in TEXT + [chat]:
        assert tok.encode(t) == hf_tok.encode(t), t
        assert tok.decode(tok.encode(t)) == t
    assert tok.eos_ids == hf_tok.eos_ids and tok.apply_chat_template(CHAT) == chat


def test_gguf_gpt4o_pre_tokenizer_and_unknown_ones_refused(models_dir):
    """llama.cpp's "gpt-4o" (o200k, gpt-oss's): pieces never cross its splits (case changes, 3-digit
    groups, punctuation runs with trailing newlines); an unknown pre-tokenizer is refused, as
    llama.cpp does, instead of splitting text another way."""
    import regex

    from vkdecode.models.gguf_vocab import PRE_REGEX

    g = write_gguf(tiny_hf_model("llama", models_dir), models_dir / "tok-gpt4o.gguf", "f16", pre="gpt-4o")
    tok = Tokenizer.from_gguf(open_gguf(str(g)), str(g))
    text = "HelloWorld's THE cat's 1234567 ab/\n\n  x  $$$/\n"
    want = [
        "Hello",
        "World's",
        " THE",
        " cat's",
        " ",
        "123",
        "456",
        "7",
        " ab",
        "/\n\n",
        " ",
        " x",
        " ",
        " $$$/\n",
    ]
    assert regex.findall(PRE_REGEX["gpt-4o"][0], text) == want
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    pieces = [tok.decode([i]) for i in ids]
    bounds = {sum(map(len, want[:n])) for n in range(len(want) + 1)}
    assert {sum(map(len, pieces[:n])) for n in range(len(pieces) + 1)} >= bounds
    bad = write_gguf(
        tiny_hf_model("llama", models_dir), models_dir / "tok-unknown-pre.gguf", "f16", pre="tekken"
    )
    with pytest.raises(ModelError, match="'tekken'.*tokenizer.ggml.pre"):
        Tokenizer.from_gguf(open_gguf(str(bad)), str(bad))


def test_smollm2_tokenizer():
    tok = load_smollm2().tokenizer
    assert tok.encode("What is the capital of France?") == [1780, 314, 260, 3575, 282, 4649, 47]
    assert len(tok.encode("12345")) == 5  # the "smollm" pre-tokenizer splits digits
    assert tok.eos_ids == {2} and tok.id_to_token(2) == "<|im_end|>" and tok.bos_id == 1
    for t in TEXT:
        assert tok.decode(tok.encode(t)) == t
    text = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.encode(text)[:1] == [1]


def test_stream_decoder_holds_back_split_characters(hf_tok):
    text = "naïve café 東京 🙂 done"
    ids = hf_tok.encode(text)
    stream, pieces = hf_tok.stream(), []
    for i in ids:
        pieces.append(stream.add(i))
    pieces.append(stream.flush())
    assert "".join(pieces) == text
    assert not any("\ufffd" in p for p in pieces)
    assert sum(p == "" for p in pieces) > 1  # some multi-byte characters did span tokens


def test_chat_template_conventions(hf_tok):
    t = Tokenizer(
        hf_tok.tok,
        hf_tok.eos_ids,
        hf_tok.tok.token_to_id("<|im_start|>"),
        "{{ bos_token }}{% for m in messages %}{{ m['content'] | tojson }}{{ eos_token }}{% endfor %}"
        "{% if add_generation_prompt %}GO{% endif %}",
    )
    assert t.apply_chat_template(CHAT) == '<|im_start|>"Be brief."<|im_end|>"Hi 12 東京"<|im_end|>GO'
    assert t.apply_chat_template(CHAT, add_generation_prompt=False).endswith("<|im_end|>")
    t.chat_template = "{{ raise_exception('no system role') }}"
    with pytest.raises(ModelError, match="no system role"):
        t.apply_chat_template(CHAT)
    # Llama 3.1+ and gpt-oss templates date their system message with transformers' strftime_now
    t.chat_template = "Today Date: {{ strftime_now('%Y-%m-%d') }}"
    today = datetime.date.today()
    assert t.apply_chat_template(CHAT) in {
        f"Today Date: {d.isoformat()}" for d in (today, today + datetime.timedelta(1))
    }
    t.chat_template = None  # no silent ChatML fallback: an error naming the problem
    with pytest.raises(ModelError, match="no chat template"):
        t.apply_chat_template(CHAT)


def spm_gguf(path, with_tokenizer=True):
    pieces = {"▁the": -1.0, "▁t": -2.0, "he": -3.0, "▁cat": -4.0, "▁c": -5.0, "at": -6.0}
    singles = ["▁", "t", "h", "e", "c", "a"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + singles + list(pieces)
    scores = [0.0] * 259 + [-10.0] * len(singles) + list(pieces.values())
    types = [2, 3, 3] + [6] * 256 + [1] * (len(singles) + len(pieces))
    w = gguf.GGUFWriter(str(path), "llama")
    if with_tokenizer:
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return str(path), tokens


def test_gguf_sentencepiece(tmp_path):
    path, tokens = spm_gguf(tmp_path / "spm.gguf")
    tok = Tokenizer.from_gguf(open_gguf(path), path)
    ids = tok.encode("the cat")
    assert [tokens[i] for i in ids] == ["▁the", "▁cat"]
    assert tok.encode("the cat", add_special=True)[0] == 1  # llama adds BOS by default
    e = tok.encode("thé")
    assert [tokens[i] for i in e][-2:] == ["<0xC3>", "<0xA9>"]  # byte fallback
    assert tok.decode(e) == "thé" and tok.decode(ids) == "the cat" and tok.eos_ids == {2}


def test_missing_tokenizer(models_dir, tmp_path):
    path, _ = spm_gguf(tmp_path / "none.gguf", with_tokenizer=False)
    with pytest.raises(ModelError, match="none.gguf.*tokenizer.ggml.model"):
        Tokenizer.from_gguf(open_gguf(path), path)
    d = tmp_path / "hf"
    shutil.copytree(tiny_hf_model("llama", models_dir), d)
    (d / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="tokenizer.json"):
        Tokenizer.from_hf_dir(str(d))


PROMPTS = ["Hello, world", " leading space", "The capital of France is", "naïve café 東京", ""]
# vkdecode runs a byte-level tokenizer.json declared as LlamaTokenizer the way transformers 5.22+
# does (CI installs the newest); 5.17 (the GPU machine's own) and 5.21.1 encode it otherwise
LLAMACLASS_SINCE = (5, 22)


@pytest.mark.parametrize("style", sorted(TOKENIZER_STYLES))
def test_prompt_and_chat_ids_equal_transformers(tmp_path_factory, style):
    """A raw prompt encodes to transformers' tokenizer(prompt)["input_ids"] (the post-processor's BOS
    included: Llama 2 / 3 style), a chat to apply_chat_template(tokenize=True,
    add_generation_prompt=True) (the template's own BOS, never a second one)."""
    import transformers

    have = tuple(int(x) for x in transformers.__version__.split(".")[:2])
    if style == "bytelevel-llamaclass" and have < LLAMACLASS_SINCE:
        pytest.skip(
            f"transformers {transformers.__version__} encodes a byte-level LlamaTokenizer otherwise than "
            f"{'.'.join(map(str, LLAMACLASS_SINCE))}+, which vkdecode follows"
        )
    d = write_tokenizer_style(tmp_path_factory.getbasetemp() / f"tok-{style}", style)
    hf = transformers.AutoTokenizer.from_pretrained(str(d))
    tok = Tokenizer.from_hf_dir(str(d))
    for p in PROMPTS:
        assert tok.encode_prompt(p) == hf(p)["input_ids"], p
    for msgs in (CHAT[1:], [{"role": "user", "content": "What is the capital of France?"}]):
        want = hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True)
        want = want["input_ids"] if hasattr(want, "keys") else want
        assert tok.encode_chat(msgs) == list(want)
    if TOKENIZER_STYLES[style][1]:
        assert tok.encode_prompt("Hi")[0] == hf.bos_token_id  # the case that used to lose its BOS


def test_chat_without_a_template_is_an_error(tmp_path):
    d = write_tokenizer_style(tmp_path / "t", "bytelevel")
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = Tokenizer.from_hf_dir(str(d))
    assert tok.encode_prompt("Hi") == tok.encode("Hi")
    with pytest.raises(ModelError, match="no chat template") as e:
        tok.encode_chat(CHAT)
    assert "--prompt" in str(e.value) and str(d) in str(e.value)


@pytest.mark.parametrize(
    "pre,add_bos,want_bos",
    [("smollm", None, False), ("llama-bpe", None, True), ("smollm", True, True), ("llama-bpe", False, False)],
)
def test_gguf_add_bos_as_llama_cpp(models_dir, pre, add_bos, want_bos):
    """tokenizer.ggml.add_bos_token when present, else llama.cpp's default for the pre-tokenizer."""
    g = write_gguf(
        tiny_hf_model("llama", models_dir),
        models_dir / f"tok-bos-{pre}-{add_bos}.gguf",
        "f16",
        pre=pre,
        add_bos=add_bos,
    )
    tok = Tokenizer.from_gguf(open_gguf(str(g)), str(g))
    ids = tok.encode_prompt("Hello")
    assert (ids[0] == tok.bos_id) == want_bos and ids[want_bos:] == tok.encode("Hello")
    chat = tok.encode_chat(CHAT)
    assert chat == tok.encode(tok.apply_chat_template(CHAT))  # the template decides, no BOS added


def test_gguf_add_eos_token(models_dir):
    """tokenizer.ggml.add_eos_token: llama.cpp appends EOS to a raw prompt (never to a chat)."""
    g = write_gguf(
        tiny_hf_model("llama", models_dir),
        models_dir / "tok-eos.gguf",
        "f16",
        metadata={"tokenizer.ggml.add_eos_token": True},
    )
    tok = Tokenizer.from_gguf(open_gguf(str(g)), str(g))
    assert tok.encode_prompt("Hello") == tok.encode("Hello") + [tok.tok.token_to_id("<|im_end|>")]
    assert tok.encode_chat(CHAT) == tok.encode(tok.apply_chat_template(CHAT))

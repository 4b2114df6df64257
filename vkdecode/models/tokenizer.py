"""Tokenizer: HF `tokenizers` from tokenizer.json, or one rebuilt from a GGUF-embedded vocabulary
(gguf_vocab.py); the model's chat template rendered with jinja2 the way transformers does; a
streaming detokenizer.
"""

from __future__ import annotations

import datetime
import json
import os

from vkdecode.errors import ModelError
from vkdecode.models.gguf_vocab import byte_level_bpe, sentencepiece_bpe

TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_BYTE = 3, 4, 6
# llama.cpp's defaults for tokenizer.ggml.add_bos_token when the key is absent (llama-vocab.cpp):
# SentencePiece ("llama") adds BOS; byte-level BPE only for the Llama-3 group of pre-tokenizers.
GGUF_BOS_PRES = (
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "jina-v5-nano",
)


class Tokenizer:
    def __init__(
        self,
        tok,
        eos_ids=(),
        bos_id: int | None = None,
        chat_template: str | None = None,
        add_bos: bool = False,
        source: str = "",
        add_eos_id: int | None = None,
    ):
        self.tok, self.source = tok, source
        self.eos_ids: set[int] = {int(i) for i in eos_ids if i is not None}
        self.bos_id, self.add_bos = bos_id, add_bos
        self.add_eos_id = add_eos_id  # GGUF tokenizer.ggml.add_eos_token: appended to raw prompts
        self.chat_template = chat_template

    # -- construction --
    @classmethod
    def from_hf_dir(cls, path: str, extra_eos=()) -> Tokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        file = os.path.join(path, "tokenizer.json")
        if not os.path.exists(file):
            raise ModelError(f"{path}: no tokenizer.json in the model directory")
        try:
            tok = HFTokenizer.from_file(file)
        except Exception as e:  # noqa: BLE001 - tokenizers raises its own untyped errors
            raise ModelError(f"{file}: cannot load tokenizer: {e}") from None
        cfg = _read_json(os.path.join(path, "tokenizer_config.json"))
        gen = _read_json(os.path.join(path, "generation_config.json"))
        _as_transformers_llama(tok, cfg)
        eos = set(extra_eos)
        name = cfg.get("eos_token")
        name = name.get("content") if isinstance(name, dict) else name
        if name is not None and tok.token_to_id(name) is not None:
            eos.add(tok.token_to_id(name))
        g = gen.get("eos_token_id")
        eos.update([g] if isinstance(g, int) else (g or []))
        bos = cfg.get("bos_token")
        bos = bos.get("content") if isinstance(bos, dict) else bos
        template = cfg.get("chat_template")
        if template is None and os.path.exists(os.path.join(path, "chat_template.jinja")):
            with open(os.path.join(path, "chat_template.jinja"), encoding="utf-8") as f:
                template = f.read()
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        return cls(tok, eos, tok.token_to_id(bos) if bos else None, template, source=file)

    @classmethod
    def from_gguf(cls, reader, path: str) -> Tokenizer:
        def field(name, default=None):
            f = reader.fields.get(name)
            try:
                return default if f is None else f.contents()
            except (ValueError, IndexError, TypeError) as e:  # bad UTF-8 in a corrupt file
                raise ModelError(f"{path}: key {name!r} cannot be read ({type(e).__name__}: {e})") from None

        try:
            return cls._from_gguf_fields(field, path)
        except ModelError:
            raise
        except Exception as e:  # noqa: BLE001 - tokenizers raises untyped errors on a bad vocabulary
            raise ModelError(
                f"{path}: cannot build the tokenizer from the GGUF vocabulary ({type(e).__name__}: {e})"
            ) from None

    @classmethod
    def _from_gguf_fields(cls, field, path: str) -> Tokenizer:
        model = field("tokenizer.ggml.model")
        if model is None or field("tokenizer.ggml.tokens") is None:
            raise ModelError(
                f"{path}: no tokenizer (missing key 'tokenizer.ggml.model' or 'tokenizer.ggml.tokens')"
            )
        tokens = field("tokenizer.ggml.tokens")
        types = field("tokenizer.ggml.token_type") or [1] * len(tokens)
        if model == "gpt2":
            tok = byte_level_bpe(
                path, tokens, field("tokenizer.ggml.merges"), field("tokenizer.ggml.pre", "default")
            )
        elif model == "llama":
            tok = sentencepiece_bpe(
                path,
                tokens,
                field("tokenizer.ggml.scores"),
                types,
                bool(field("tokenizer.ggml.add_space_prefix", True)),
            )
        else:
            raise ModelError(
                f"{path}: tokenizer model {model!r} (key 'tokenizer.ggml.model') is not supported "
                "(supported: gpt2, llama)"
            )
        from tokenizers import AddedToken

        # control / user-defined tokens (<|im_start|> ...) must match as whole tokens in chat text
        added = [
            AddedToken(t, special=ty == TOKEN_CONTROL, normalized=False)
            for t, ty in zip(tokens, types)
            if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)
        ]
        tok.add_special_tokens([a for a in added if a.special])
        tok.add_tokens([a for a in added if not a.special])
        eos = field("tokenizer.ggml.eos_token_id")
        eot = field("tokenizer.ggml.eot_token_id")
        add_bos = model == "llama" or field("tokenizer.ggml.pre", "default") in GGUF_BOS_PRES
        add_eos = bool(field("tokenizer.ggml.add_eos_token", False))
        return cls(
            tok,
            [eos, eot],
            field("tokenizer.ggml.bos_token_id"),
            field("tokenizer.chat_template"),
            add_bos=bool(field("tokenizer.ggml.add_bos_token", add_bos)),
            source=path,
            add_eos_id=eos if add_eos else None,
        )

    # -- use --
    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special: bool = False) -> list[int]:
        """add_special: what a raw prompt gets, as transformers' tokenizer(text) and llama.cpp do:
        tokenizer.json's post-processor (e.g. a Llama-style TemplateProcessing adding BOS), or for
        GGUF the BOS that tokenizer.ggml.add_bos_token asks for. Chat text is encoded without."""
        ids = self.tok.encode(text, add_special_tokens=add_special).ids
        if add_special and self.add_bos and self.bos_id is not None and ids[:1] != [self.bos_id]:
            ids = [self.bos_id] + ids
        if add_special and self.add_eos_id is not None:
            ids = ids + [self.add_eos_id]
        return ids

    def encode_prompt(self, text: str) -> list[int]:
        """A raw prompt's ids (special tokens added as the model's tokenizer says)."""
        return self.encode(text, add_special=True)

    def encode_chat(self, messages: list[dict]) -> list[int]:
        """The chat template rendered with a generation prompt, then encoded as-is: the template
        writes any BOS itself (transformers' apply_chat_template(tokenize=True) does the same)."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt=True))

    def decode(self, ids, skip_special: bool = False) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def id_to_token(self, i: int) -> str | None:
        return self.tok.id_to_token(int(i))

    def stream(self, skip_special: bool = False) -> StreamDecoder:
        return StreamDecoder(self, skip_special)

    def _compiled_template(self):
        cached = getattr(self, "_template_cache", None)
        if cached is None or cached[0] != self.chat_template:  # the template may be set after load
            cached = (self.chat_template, _compile_template(self.chat_template))
            self._template_cache = cached
        return cached[1]

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True, **kwargs) -> str:
        if not self.chat_template:
            raise ModelError(
                f"{self.source}: the model has no chat template (tokenizer_config.json "
                "'chat_template', chat_template.jinja, or GGUF 'tokenizer.chat_template'), so a "
                "chat message cannot be formatted for it; pass raw text as a prompt instead "
                "(--prompt)"
            )
        from jinja2 import TemplateError

        name = lambda i: self.tok.id_to_token(i) if i is not None else ""
        eos = min(self.eos_ids) if self.eos_ids else None
        try:
            return self._compiled_template().render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=name(self.bos_id),
                eos_token=name(eos),
                **kwargs,
            )
        except TemplateError as e:
            raise ModelError(f"{self.source}: chat template failed: {e}") from None


def _compile_template(text: str):
    """A chat template compiled in transformers' settings, so templates written for it render the
    same here. Compiled once per template text (serve formats every chat request with it)."""
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None, **_: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    # today's date, as transformers gives it: Llama 3.1+'s "Today Date" and gpt-oss's harmony
    # system message call it (an undefined global would end the render in an error)
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(text)


class StreamDecoder:
    """Incremental detokenizer: add(token) returns only newly completed text, holding back bytes
    of a UTF-8 character split across tokens (they decode to U+FFFD until complete)."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self.t, self.skip = tokenizer, skip_special
        self.tokens: list[int] = []
        self.prefix = self.read = 0  # decode a window, not the whole text, to stay O(n)

    def add(self, token: int) -> str:
        self.tokens.append(int(token))
        before = self.t.decode(self.tokens[self.prefix : self.read], self.skip)
        now = self.t.decode(self.tokens[self.prefix :], self.skip)
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.tokens)
            return now[len(before) :]
        return ""

    def flush(self) -> str:
        """Whatever is held back at the end (an incomplete character comes out as U+FFFD)."""
        before = self.t.decode(self.tokens[self.prefix : self.read], self.skip)
        now = self.t.decode(self.tokens[self.prefix :], self.skip)
        self.prefix = self.read = len(self.tokens)
        return now[len(before) :]


def _as_transformers_llama(tok, cfg: dict) -> None:
    """transformers (5.x) loads a SentencePiece-style tokenizer.json declared as LlamaTokenizer
    with its own pipeline, not the file's normalizer: no normalizer, a Metaspace pre-tokenizer that
    prefixes "▁" to the first text segment only (legacy=False; every segment with legacy=True, none
    with add_prefix_space=False), the file's post-processor kept. Without this, text after a special
    token (a chat template's "<s>[INST]") gets a "▁" transformers does not put there."""
    from tokenizers import decoders, pre_tokenizers

    if str(cfg.get("tokenizer_class") or "").removesuffix("Fast") != "LlamaTokenizer":
        return
    if "ByteLevel" in str(tok.pre_tokenizer) + str(tok.decoder):  # transformers uses the file as is
        return
    prefix = cfg.get("add_prefix_space")
    prefix = True if prefix is None else bool(prefix)
    scheme = ("always" if cfg.get("legacy", False) else "first") if prefix else "never"
    tok.normalizer = None
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=False)
    dec = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    tok.decoder = decoders.Sequence(dec + ([decoders.Strip(" ", 1, 0)] if prefix else []))


def _read_json(file: str) -> dict:
    if not os.path.exists(file):
        return {}
    try:
        with open(file, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise ModelError(f"{file}: cannot read: {e}") from None

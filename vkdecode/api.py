"""Python API, in the manner of mlx-lm:

with vkdecode.load("model.gguf") as model:
    print(model.generate("Hello", max_tokens=32))
    for r in model.stream_generate(chat="What is the capital of France?"):
        print(r.text, end="", flush=True)

A chat with a reasoning model (gpt-oss's harmony channels, Qwen3's <think> block) also splits
each response's text into r.reasoning and r.content (vkdecode/reasoning.py); r.text stays raw.
"""

from __future__ import annotations

import time

from vkdecode import reasoning
from vkdecode.errors import UsageError
from vkdecode.generate import GenerationResponse, stream_generate
from vkdecode.options import DecodeOptions, check_text
from vkdecode.reasoning import GeneratedText


class Model:
    """A loaded model on a device: the tokenizer and the Decoder (executors/decoder.py) built from
    one DecodeOptions (options.py). `executor` is the decode step's executor (its stats, regions)."""

    def __init__(self, path, options: DecodeOptions | None = None, device=None, progress: bool = False):
        from vkdecode.executors.decoder import Decoder
        from vkdecode.models.loader import load_model
        from vkdecode.prompt_cache import KVPrefix
        from vkdecode.vk.device import Device

        t0 = time.perf_counter()
        self.options = opts = options or DecodeOptions()
        self.kv = KVPrefix()  # what the KV cache holds, for prompt_cache=True
        # streamed: each weight packed just before its upload, no host copy kept (models/lazy.py)
        self.loaded = load_model(
            path, ctx=opts.ctx, sampling=opts.sampling, kv_dtype=opts.kv_dtype, stream=True
        )
        self._own_device = device is None or isinstance(device, (str, int))
        self.device = Device(device) if self._own_device else device
        self.decoder = None
        self._batch = None  # executors.batch.BatchDecode, built by the first batched call
        try:
            bar = _upload_bar(self.loaded) if progress else None
            self.decoder = Decoder.build(self.device, self.loaded.program, self.loaded.weights, opts, bar)
            if bar is not None:
                bar.close()
        except BaseException:
            self.close()
            raise
        from fusion.chunk import has_recurrent_state

        if has_recurrent_state(self.loaded.program):
            from vkdecode.executors.state_checkpoint import StateCheckpoint

            self.kv.rewindable = False
            self.kv.checkpoint = StateCheckpoint(self.decoder.executor)
        self.load_s = time.perf_counter() - t0

    @property
    def executor(self):
        return self.decoder.executor if self.decoder is not None else None

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def mode(self) -> str:
        return self.executor.mode

    @property
    def reasoning_format(self) -> str | None:
        """How this model's output carries reasoning: "harmony", "think" or None (reasoning.py)."""
        return reasoning.detect(self.loaded.args.arch, self.tokenizer)

    def encode_prompt(self, prompt: str | None = None, chat: str | None = None) -> list[int]:
        """chat: the model's chat template (an error if it has none); prompt: raw text with the
        special tokens the model's tokenizer adds (BOS for Llama-style tokenizers)."""
        tok = self.tokenizer
        check_text("prompt", prompt)
        check_text("chat", chat)
        if chat is not None:
            return tok.encode_chat([{"role": "user", "content": chat}])
        return tok.encode_prompt(prompt or "")

    def stream_generate(
        self,
        prompt: str | None = None,
        chat: str | None = None,
        max_tokens: int = 256,
        prompt_ids: list[int] | None = None,
        temp: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        prompt_cache: bool = False,
        should_stop=None,
        reasoning_format: str | None = "auto",
    ):
        """Yields GenerationResponse per token. temp > 0 samples on the GPU (load with sampling=True).
        prompt_cache=True skips the leading prompt tokens whose K/V rows the last generation left in
        the cache (the previous turn of a chat): same tokens out, fewer steps run; the last
        response's stats["cached_tokens"] tells how many. should_stop() is polled between prompt steps.
        reasoning_format: how r.reasoning / r.content split the text: "auto" (the model's format, for
        chat= only: a raw prompt continues text, it opens no turn), "harmony", "think", or "none"."""
        from vkdecode.sampling import SamplingParams

        params = SamplingParams(temp, top_k, top_p, seed)
        ids = prompt_ids if prompt_ids is not None else self.encode_prompt(prompt, chat)
        fmt = self._reasoning(reasoning_format, chat is not None)
        gen = stream_generate(
            self.decoder,
            self.tokenizer,
            ids,
            max_tokens,
            self.load_s,
            sampling=params,
            kv=self.kv,
            reuse=prompt_cache,
            should_stop=should_stop,
        )
        return reasoning.split_responses(gen, self._parser(fmt, ids)) if fmt else gen

    def _reasoning(self, choice: str | None, chat: bool) -> str | None:
        """The reasoning format to split with: "auto" is the model's for chats only (a raw prompt
        continues text, it opens no turn)."""
        try:
            return reasoning.resolve(choice, self.reasoning_format if chat else None)
        except ValueError as e:
            raise UsageError(str(e)) from None

    def _parser(self, fmt: str, ids: list[int]):
        """A reasoning parser for one generation, started from its prompt's last tokens (a block
        the template opened)."""
        return reasoning.make_parser(fmt, self.tokenizer.decode(ids[-reasoning.PROMPT_TAIL_TOKENS :]))

    def generate(
        self, prompt: str | None = None, chat: str | None = None, max_tokens: int = 256, **kw
    ) -> GeneratedText:
        """The text (raw, as before), with .reasoning and .content split as stream_generate's."""
        rs = list(self.stream_generate(prompt, chat, max_tokens, **kw))
        return GeneratedText.of(
            *("".join(getattr(r, f) for r in rs) for f in ("text", "reasoning", "content"))
        )

    def batch(self, widths=None):
        """The batched decode steps (executors/batch.py), built on first use; widths: the batch
        widths to record (default executors.batch.WIDTHS; another set rebuilds them). A sequence
        alone in it decodes on the plain decode step (solo: executors/solo.py)."""
        from vkdecode.executors.batch import WIDTHS, BatchDecode
        from vkdecode.executors.batch_pick import calibrate

        want = tuple(sorted(set(widths or WIDTHS)))
        if self._batch is None or self._batch.widths != want:
            if self._batch is not None:
                self._batch.close()
                self._batch = None
            self._batch = BatchDecode(self.decoder, want, solo=True, pipelined=True)
            if not self.decoder.executor.caps.device_cpu:  # a GPU: time the widths (batch_pick.py)
                calibrate(self._batch)
        return self._batch

    def stream_generate_batch(
        self,
        prompts: list[str] | None = None,
        chats: list[str] | None = None,
        max_tokens=256,
        prompt_ids: list[list[int]] | None = None,
        temp=0.0,
        top_k=0,
        top_p=1.0,
        seed=0,
        widths=None,
        prompt_cache: bool = False,
        reasoning_format: str | None = "auto",
    ):
        """Yields batch.BatchResponse per token of each sequence (its .index: which prompt), the
        sequences decoded together in batched steps. Sampling settings and max_tokens: one value
        for all prompts or a list of one per prompt. reasoning_format: as stream_generate's, each
        sequence split by its own parser (r.reasoning / r.content)."""
        from vkdecode.batch import per_prompt, stream_generate_batch
        from vkdecode.sampling import SamplingParams

        if isinstance(prompts, str) or isinstance(chats, str):
            raise UsageError("generate_batch takes a list of prompts (or chats), not one string")
        if prompt_ids is None:
            texts = chats if chats is not None else prompts or []
            key = "chat" if chats is not None else "prompt"
            prompt_ids = [self.encode_prompt(**{key: t}) for t in texts]
        n = len(prompt_ids)
        cols = [
            per_prompt(v, n, k)
            for k, v in (("temp", temp), ("top_k", top_k), ("top_p", top_p), ("seed", seed))
        ]
        params = [SamplingParams(*c) for c in zip(*cols)]
        fmt = self._reasoning(reasoning_format, chats is not None)
        gen = stream_generate_batch(
            self.batch(widths), self.tokenizer, prompt_ids, max_tokens, params, self.kv, prompt_cache
        )
        if not fmt:
            return gen
        return reasoning.split_batch_responses(gen, [self._parser(fmt, ids) for ids in prompt_ids])

    def generate_batch(self, prompts=None, chats=None, max_tokens=256, **kw) -> list[str]:
        """The texts of stream_generate_batch, one per prompt, in order (mlx-lm's batch_generate)."""
        from vkdecode.batch import collect_texts

        n = len(kw.get("prompt_ids") or chats or prompts or [])
        return collect_texts(self.stream_generate_batch(prompts, chats, max_tokens, **kw), n)

    def close(self) -> None:
        if getattr(self, "_batch", None) is not None:  # it uses the decoder's slices: first
            self._batch.close()
            self._batch = None
        if getattr(self, "kv", None) is not None and self.kv.checkpoint is not None:
            self.kv.checkpoint.close()  # a buffer of the decoder's device
            self.kv.checkpoint = None
        if getattr(self, "decoder", None) is not None:
            self.decoder.close()
            self.decoder = None
        if getattr(self, "_own_device", False) and getattr(self, "device", None) is not None:
            self.device.close()
            self.device = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _upload_bar(loaded):
    from tqdm import tqdm

    total = sum(w.nbytes for w in loaded.weights.values())
    return tqdm(total=total, unit="B", unit_scale=True, desc="upload weights", leave=False)


def load(path, device=None, options: DecodeOptions | None = None, progress: bool = False, **kw) -> Model:
    """Keyword arguments are DecodeOptions fields (options.py), or pass `options`: mode="fused",
    ctx=4096; sampling=True builds the step with the GPU sampler (temperature / top-k / top-p) at
    its end; kv_dtype="f32" keeps the KV cache in f32 (default f16); prefill=False runs the prompt
    token by token, a tuple of widths picks the chunk widths; speculative=K decodes greedily with K
    prompt-lookup drafts per verify step; tokens_per_submit=K submits K steps at once (fused)."""
    if options is not None and kw:
        raise UsageError(f"pass either options= or keyword options, not both ({', '.join(sorted(kw))})")
    return Model(path, options or DecodeOptions.from_kwargs(**kw), device=device, progress=progress)


__all__ = ["DecodeOptions", "GeneratedText", "GenerationResponse", "Model", "load"]

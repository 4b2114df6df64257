"""Python API, in the manner of mlx-lm:

    with vkdecode.load("model.gguf") as model:
        print(model.generate("Hello", max_tokens=32))
        for r in model.stream_generate(chat="What is the capital of France?"):
            print(r.text, end="", flush=True)
"""
from __future__ import annotations

import time

from vkdecode.generate import GenerationResponse, stream_generate


class Model:
    def __init__(self, path, device=None, mode: str = "fused", ctx: int | None = 4096, progress: bool = False,
                 sampling: bool = False, kv_dtype: str = "f16", prefill=True, speculative: int = 0,
                 **executor_kw):
        from vkdecode.executors import make_executor
        from vkdecode.models.loader import load_model
        from vkdecode.prompt_cache import KVPrefix
        from vkdecode.vk.device import Device
        t0 = time.perf_counter()
        self.kv = KVPrefix()        # what the KV cache holds, for prompt_cache=True
        self.loaded = load_model(path, ctx=ctx, sampling=sampling, kv_dtype=kv_dtype)
        self._own_device = device is None or isinstance(device, (str, int))
        self.device = Device(device) if self._own_device else device
        try:
            bar = _upload_bar(self.loaded) if progress else None
            self.executor = make_executor(mode, self.device, self.loaded.program, self.loaded.weights,
                                          progress=bar, **executor_kw)
            if bar is not None:
                bar.close()
            # prompt chunks: True = the device's default widths, a tuple = those widths, False = none
            # (every prompt token through the decode step)
            if prefill:
                self.executor.enable_prefill(None if prefill is True else tuple(prefill))
            if speculative:
                self.executor.enable_speculative(int(speculative))
        except BaseException:
            self.close()
            raise
        self.load_s = time.perf_counter() - t0

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def mode(self) -> str:
        return self.executor.mode

    def encode_prompt(self, prompt: str | None = None, chat: str | None = None) -> list[int]:
        """chat: the model's chat template (an error if it has none); prompt: raw text with the
        special tokens the model's tokenizer adds (BOS for Llama-style tokenizers)."""
        tok = self.tokenizer
        if chat is not None:
            return tok.encode_chat([{"role": "user", "content": chat}])
        return tok.encode_prompt(prompt or "")

    def stream_generate(self, prompt: str | None = None, chat: str | None = None, max_tokens: int = 256,
                        prompt_ids: list[int] | None = None, temp: float = 0.0, top_k: int = 0,
                        top_p: float = 1.0, seed: int = 0, prompt_cache: bool = False, should_stop=None):
        """Yields GenerationResponse per token. temp > 0 samples on the GPU (load with sampling=True).
        prompt_cache=True skips the leading prompt tokens whose K/V rows the last generation left in
        the cache (the previous turn of a chat): same tokens out, fewer steps run; the last
        response's stats["cached_tokens"] tells how many. should_stop() is polled between prompt steps."""
        from vkdecode.sampling import SamplingParams
        params = SamplingParams(temp, top_k, top_p, seed)
        ids = prompt_ids if prompt_ids is not None else self.encode_prompt(prompt, chat)
        return stream_generate(self.executor, self.tokenizer, ids, max_tokens, self.load_s, sampling=params,
                               kv=self.kv, reuse=prompt_cache, should_stop=should_stop)

    def generate(self, prompt: str | None = None, chat: str | None = None, max_tokens: int = 256,
                 **sampling) -> str:
        return "".join(r.text for r in self.stream_generate(prompt, chat, max_tokens, **sampling))

    def close(self) -> None:
        ex = getattr(self, "executor", None)
        if ex is not None:
            ex.close()
            self.executor = None
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


def load(path, device=None, mode: str = "fused", ctx: int | None = 4096, **kw) -> Model:
    """sampling=True builds the step with the GPU sampler (temperature / top-k / top-p) at its end;
    kv_dtype="f32" keeps the KV cache in f32 (default f16); prefill=False runs the prompt token by
    token, a tuple of widths picks the chunk widths; speculative=K decodes greedily with K
    prompt-lookup drafts per verify step."""
    return Model(path, device=device, mode=mode, ctx=ctx, **kw)


__all__ = ["GenerationResponse", "Model", "load"]

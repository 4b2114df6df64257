"""The user's path, timed: what `vkdecode run`, the Python API and `serve` do per token —
vkdecode.load with default DecodeOptions (ctx min(4096, the model's maximum), prompt chunks, the tokenizer's streaming
detokenizer, the prompt cache's bookkeeping) and stream_generate (the prompt token by token) — against the bench's bare
fused executor on the same model and prompt. EOS is ignored, as in the bench, so both time the
same number of steps; the figure is stream_generate's own decode_tok_s (generated tokens after
the first, per second of wall time)."""

from __future__ import annotations

from vkdecode.benchmark.memory import measure_load
from vkdecode.benchmark.runner import spread


def user_path(
    device, path: str, prompt_ids: list[int], n: int, reps: int, ctx: int | None = None, log=None
) -> dict:
    """tok/s of `reps` generations of n + 1 tokens (one warm-up first) through the API's Model."""
    from vkdecode.api import Model
    from vkdecode.generate import stream_generate
    from vkdecode.options import DecodeOptions

    # the prompt token by token, as the bench's modes run it: prompt chunks round differently (f16
    # tiles, other sums), and on random weights a near-tie then flips a greedy token; the decode
    # steps timed here do not depend on how the prompt ran
    options = DecodeOptions(ctx=ctx, prefill=False)
    # host memory around the load (the bench's executors are closed by now; its packed host weights
    # are still held, so the RSS figures include them)
    model, memory = measure_load(device, lambda: Model(path, options, device=device))
    try:
        rates, tokens = [], None
        for i in range(reps + 1):
            out = list(
                stream_generate(
                    model.decoder, model.tokenizer, prompt_ids, n + 1, stop_at_eos=False, kv=model.kv
                )
            )
            if i == 0:
                tokens = [r.token for r in out]
                continue
            rates.append(out[-1].stats["decode_tok_s"])
            if log:
                log(f"user path: rep {i}/{reps} {rates[-1]:.1f} tok/s")
        return {
            "ctx": model.executor.ctx,
            "mode": model.mode,
            "tok_s": spread(rates),
            "tokens": tokens,
            "memory": memory,
        }
    finally:
        model.close()

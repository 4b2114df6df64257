"""Prompt chunks: one executor per chunk width over fusion/chunk.py's program, sharing the decode
executor's weights, KV caches and step buffer.

A width is built once (replay modes: its descriptor sets written and its command buffer recorded
once, like the decode step); per chunk the host writes the T token ids and the first position,
submits and waits: 0 descriptor writes and 0 recordings per chunk. Unfused mode re-records per
chunk, as it does per token. Widths come from a small fixed set (the number of recordings stays
bounded); a prompt is cut greedily into the widest chunks that fit and the rest (fewer tokens
than the narrowest width, and always the prompt's last token) runs through the decode step, which
is the width-1 chunk. On GPUs (KernelCaps.prefill_chunk_rows >= 0) the last chunk may be wider
than what is left of the prompt (plan_chunks): its extra rows write KV rows past the prompt,
which the decode steps at those positions overwrite before any step reads them (as rejected
draft rows in speculative decode), and never past the context. On CPUs (< 0) no chunk is padded.

Narrower widths reuse the widest width's activation buffers (chunks never run concurrently), so
activation memory is that of the widest chunk only.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

from fusion.chunk import TOKENS, chunk_program
from fusion.ir import STEP_LIVE
from vkdecode.errors import DeviceMemoryError

# widths by device kind. A CPU (lavapipe) gains little past 32-64 rows, and since its decode step
# got CPU launch shapes (67 ms a token, SmolLM2 Q4_1) a 2-row chunk (~250 ms) loses to two steps:
# lavapipe, the demo's 37-token prompt at ctx 4096, widths 64/32/8/2 1.63 s, 64/32 1.40 s; 21
# tokens: one 16-row chunk + 5 steps 1.01 s, 21 steps 1.35 s.
# On an H100 (Qwen3-0.6B F16, one chunk + the decode step) the GPU narrow-chunk matmul (<= 16 rows,
# matmul_rows_narrow.comp) makes a 16-row chunk 3.9 ms, while the tiled kernel's 32- and 128-row
# chunks cost 32 and 30-63 ms (its grid shrinks with the width; 2 rows took 96 ms before the narrow
# kernel). Measured whole prompts (SmolLM2 Q4_1 / Qwen3 F16, 128, 512, 2000 tokens, ms): widths
# 16/4 alone 25/34, 105/146, 823/1084 (many chunks' attention adds up at 2000); 512/256/128/64
# 66/119, 105/205, 264/717; 512/256/128/64/16/4 30/52, 74/148, 283/728, the best balance.
# bench/results/nvidia-h100-80gb-hbm3/*-prefill-*/
# Chunks of 2048 and 1024 rows first since 2026-12-07: a long prompt's weights are read once per
# chunk, its matmuls take wider grids, and the chunk attention's grid (kv heads x 16-row blocks: 256
# workgroups a 512-row chunk of Llama-3.2-1B, under two an SM) fills the GPU. H100, two rounds,
# 2,000 / 8,000 tokens: Llama-3.2-1B F16 37.5 / 213.0 -> 29.6 / 184.7 ms, Llama-3.1-8B Q4_K_M
# 214.9 / 1056 -> 192.9 / 970 (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-wide-chunks)
# 4096 first since the seventeenth session: 8,000 tokens, two rounds each, the 8B 902.2 / 902.3 ->
# 873.2 / 873.3 ms (847.5 / 847.6 -> 805.1 / 809.3 with the attention at 8 subgroups), the 1B
# 185.5 / 183.8 -> 171.5 / 171.3, Qwen3-0.6B 210.8 / 211.5 -> 181.6
# (bench/results/nvidia-h100-80gb-hbm3/2026-12-07-attn17, 2026-12-07-wide-chunks)
WIDTHS_GPU = (4096, 2048, 1024, 512, 256, 128, 64, 16, 4)
WIDTHS_CPU = (64, 32, 16)


def default_widths(device) -> tuple[int, ...]:
    return WIDTHS_CPU if getattr(device.info, "device_type", "") == "cpu" else WIDTHS_GPU


def split_prompt(n: int, widths) -> list[int]:
    """Chunk widths covering n tokens greedily, widest first; what is left (< the narrowest
    width) is not covered (the caller runs it through the decode step)."""
    out = []
    for w in sorted(set(widths), reverse=True):
        while n >= w:
            out.append(w)
            n -= w
    return out


def chunk_plan(n: int, widths, room: int, caps) -> list[tuple[int, int]]:
    """(width, tokens) of each chunk for n prompt tokens with `room` KV rows left: exact widths
    greedily where caps.prefill_chunk_rows < 0 (CPUs), else plan_chunks with that chunk cost
    (0: 64 rows; a decode-step token costs a third of it: an H100 runs a Qwen3-0.6B F16 decode step
    in ~1 ms, a 4-row chunk in 3.1)."""
    fixed = caps.prefill_chunk_rows
    if fixed < 0:
        return [(w, w) for w in split_prompt(n, widths)]
    fixed = fixed or 64
    return list(plan_chunks(n, tuple(sorted(set(widths))), room, fixed, fixed // 3))


@functools.lru_cache(maxsize=256)
def plan_chunks(
    n: int, widths: tuple[int, ...], room: int, fixed: int, step: int
) -> tuple[tuple[int, int], ...]:
    """((width, tokens), ...) covering a prefix of n tokens; the rest runs through the decode step.
    Only the last chunk may hold fewer tokens than its width (padded), and only when `room` (KV
    rows from the first chunk's position to the context end) holds all its rows. Minimises the
    sum of fixed + width per chunk plus `step` per decode-step token (costs in rows of work):
    a GPU pays a chunk's dispatches and weight reads whatever its width, so 511 tokens run as one
    512-row chunk rather than 256 + 128 + 64 + 16 x 3 + 4 x 3 + 3 decode steps."""
    ws = sorted(set(widths))
    head: list[tuple[int, int]] = []
    while n >= 2 * ws[-1]:  # whole widest chunks; plan only the last stretch
        head.append((ws[-1], ws[-1]))
        n, room = n - ws[-1], room - ws[-1]
    inf = float("inf")
    best, last = [0.0] + [inf] * n, [0] * (n + 1)  # exact covers of k tokens
    for k in range(1, n + 1):
        for w in ws:
            if w <= k and best[k - w] + fixed + w < best[k]:
                best[k], last[k] = best[k - w] + fixed + w, w
    cost, k_best, tail = inf, 0, None
    for k in range(n + 1):
        r = n - k
        opts = [(best[k] + step * r, None)] + [
            (best[k] + fixed + w, w) for w in ws if w >= r > 0 and k + w <= room
        ]
        for c, w in opts:
            if c < cost:
                cost, k_best, tail = c, k, w
    chunks, k = [], k_best
    while k:
        chunks.append((last[k], last[k]))
        k -= last[k]
    chunks = head + sorted(chunks, reverse=True)
    return tuple(chunks + ([(tail, n - k_best)] if tail else []))


class ChunkRun(NamedTuple):
    width: int  # the chunk program that ran
    tokens: int  # prompt tokens it covered (< width: padded)
    stats: object  # its TokenStats


def chunk_executor(mode: str, device, program, caps, share, profile: bool = False):
    """An executor of a chunk program in `mode`, every slice it can share taken from `share`.
    unfused and replay-nofuse run the chunk's per-op kernels; replay modes record them once (with
    profile, GPU timestamps per region). The decode rules are never applied to a chunk (their
    kernels are matvecs): in the fused mode a batched step (program.meta batch_rows) takes
    fusion.rules.BATCH_RULES, a prompt chunk (chunk_rows: prefill, the verify step) CHUNK_RULES."""
    from fusion.rules import BATCH_RULES, CHUNK_RULES
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.executors.unfused import UnfusedExecutor

    if mode == "unfused":
        return UnfusedExecutor(device, program, {}, caps, share=share)
    rules = BATCH_RULES if program.meta.get("batch_rows") else CHUNK_RULES
    ex = ReplayExecutor(
        device, program, {}, caps, fuse=mode == "fused", rules=list(rules), share=share, profile=profile
    )
    ex.mode = mode
    return ex


class Prefill:
    """The prompt chunks of one decode executor. With the device's default widths, a widest width
    whose buffers do not fit the device memory is left out (`dropped`, and a warning): an 8B's
    4096-row chunk holds ~240 MiB of activations, which a GPU that just fits the weights and the KV
    cache may not have. Widths the caller names are built or refused, never dropped."""

    def __init__(self, decode_ex, widths=None):
        self.decode = decode_ex
        ws = widths if widths is not None else default_widths(decode_ex.device)
        self.widths = tuple(sorted({int(w) for w in ws if 1 <= int(w) <= decode_ex.ctx}, reverse=True))
        self.runners: dict[int, object] = {}
        self.dropped: tuple[int, ...] = ()
        while True:
            try:
                self._build()
                break
            except DeviceMemoryError as e:
                self.close()
                if widths is not None or len(self.widths) < 2:
                    raise
                self.dropped += self.widths[:1]
                self.widths = self.widths[1:]
                warnings.warn(f"prompt chunks of {self.dropped[-1]} rows left out: {e}", stacklevel=2)
            except BaseException:
                self.close()
                raise
        self.chunks: list[ChunkRun] = []  # every chunk run since the caller last cleared it

    def _build(self) -> None:
        share = [self.decode.plan]
        for w in self.widths:
            prog = chunk_program(self.decode.program, w, "kv")
            ex = chunk_executor(self.decode.mode, self.decode.device, prog, self.decode.caps, share)
            self.runners[w] = ex
            if len(share) == 1:
                share = [self.decode.plan, ex.plan]  # the widest chunk's activations for the rest

    def plan(self, n: int, pos0: int) -> list[tuple[int, int]]:
        """(width, tokens) of the chunks that cover a prefix of n prompt tokens from pos0."""
        return chunk_plan(n, self.widths, self.decode.ctx - pos0, self.decode.caps)

    def run_chunk(self, w: int, tokens, pos: int) -> None:
        """One chunk of width w: the KV rows of tokens (at most w) at positions pos.. written."""
        ex, n = self.runners[w], len(tokens)
        ids = ex.plan.slices[(TOKENS, "data")]
        # padding rows repeat the last token: their KV rows (past the prompt's) are written and
        # later overwritten by the decode steps of those positions before any step reads them
        ids.buffer.write_u32(ids.offset // 4, [int(t) for t in tokens] + [int(tokens[-1])] * (w - n))
        # the prompt rows, so a recurrent state (Qwen3.5's) steps through those only: a padding row
        # would stay in it, where a KV row is overwritten by its position's decode step. Back to 0
        # (all rows) after it: the step record may be another executor's too (a verify step's)
        ex.write_step_word(STEP_LIVE, n)
        try:
            ex.step(int(tokens[0]), pos)
        finally:
            ex.write_step_word(STEP_LIVE, 0)
        self.chunks.append(ChunkRun(w, n, ex.token_stats[-1]))
        ex.token_stats.clear()

    def run(self, tokens, pos0: int, should_stop=None) -> int | None:
        """Fill the KV cache for tokens at positions pos0..; returns how many were covered (a
        prefix: the caller runs the rest through the decode step), or None when should_stop()
        turned true before a chunk."""
        done = 0
        for w, n in self.plan(len(tokens), pos0):
            if should_stop is not None and should_stop():
                return None
            self.run_chunk(w, tokens[done : done + n], pos0 + done)
            done += n
        return done

    def region_stats(self) -> dict[int, list[dict]]:
        return {w: ex.region_stats() for w, ex in self.runners.items()}

    def close(self) -> None:
        for ex in self.runners.values():
            ex.close()
        self.runners = {}

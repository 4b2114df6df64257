"""Prompt chunks: one executor per chunk width over fusion/chunk.py's program, sharing the decode
executor's weights, KV caches and step buffer.

A width is built once (replay modes: its descriptor sets written and its command buffer recorded
once, like the decode step); per chunk the host writes the T token ids and the first position,
submits and waits: 0 descriptor writes and 0 recordings per chunk. Unfused mode re-records per
chunk, as it does per token. Widths come from a small fixed set (the number of recordings stays
bounded); a prompt is cut greedily into the widest chunks that fit, a rest that nearly fills a
width runs as one padded chunk (split_prompt), and what is left (fewer tokens than the narrowest
width, and always the prompt's last token) runs through the decode step, the width-1 chunk.

Narrower widths reuse the widest width's activation buffers (chunks never run concurrently), so
activation memory is that of the widest chunk only.
"""
from __future__ import annotations

from typing import NamedTuple

from fusion.chunk import TOKENS, chunk_program

# widths by device kind. A CPU (lavapipe) gains little past 32-64 rows; width 2 keeps the tokens
# left to the decode step (each as costly as a whole chunk there: ~0.7 s for SmolLM2) at one or two.
# On an H100 (Qwen3-0.6B F16, one chunk + the decode step) the GPU narrow-chunk matmul (<= 16 rows,
# matmul_rows_narrow.comp) makes a 16-row chunk 3.9 ms, while the tiled kernel's 32- and 128-row
# chunks cost 32 and 30-63 ms (its grid shrinks with the width; 2 rows took 96 ms before the narrow
# kernel). Measured whole prompts (SmolLM2 Q4_1 / Qwen3 F16, 128, 512, 2000 tokens, ms): widths
# 16/4 alone 25/34, 105/146, 823/1084 (many chunks' attention adds up at 2000); 512/256/128/64
# 66/119, 105/205, 264/717; 512/256/128/64/16/4 30/52, 74/148, 283/728, the best balance.
# bench/results/nvidia-h100-80gb-hbm3/prefill-*/
WIDTHS_GPU = (512, 256, 128, 64, 16, 4)
WIDTHS_CPU = (64, 32, 8, 2)


def default_widths(device) -> tuple[int, ...]:
    return WIDTHS_CPU if getattr(device.info, "device_type", "") == "cpu" else WIDTHS_GPU


# A rest of at least this fraction of the next wider width runs as one chunk of that width, its
# last rows padding: one 512-row chunk for a 511-token prompt instead of nine (256+128+64+16x3+4x3).
# Padding rows write KV rows past the prompt, which decode steps overwrite before anything reads
# them (attention reads rows up to its own position only), as with a verify step's rejected drafts.
PAD_FILL = 0.75


def split_prompt(n: int, widths, room: int | None = None) -> list[tuple[int, int]]:
    """(width, prompt tokens) of the chunks covering n tokens: the widest chunks that fit, and a
    rest of >= PAD_FILL of a width as one padded chunk, if `room` (context rows left from the
    first chunk's position; None: no padding) holds it. What is left (fewer tokens than the
    narrowest width) is not covered: the caller runs it through the decode step."""
    ws = sorted(set(widths), reverse=True)
    out: list[tuple[int, int]] = []
    while n > 0:
        up = [w for w in ws if n <= w <= (room if room is not None else n)]
        if up and n >= PAD_FILL * min(up):
            out.append((min(up), n))
            break
        down = [w for w in ws if w <= n]
        if not down:
            break
        out.append((down[0], down[0]))
        n -= down[0]
        if room is not None:
            room -= down[0]
    return out


class ChunkRun(NamedTuple):
    width: int          # the chunk program that ran
    tokens: int         # prompt tokens it covered (< width: padded)
    stats: object       # its TokenStats


def chunk_executor(mode: str, device, program, caps, share):
    """An executor of a chunk program in `mode`, every slice it can share taken from `share`.
    Replay modes run the per-op chunk kernels recorded once (no fusion rule matches rows > 1)."""
    from vkdecode.executors.replay import ReplayExecutor
    from vkdecode.executors.unfused import UnfusedExecutor
    if mode == "unfused":
        return UnfusedExecutor(device, program, {}, caps, share=share)
    ex = ReplayExecutor(device, program, {}, caps, fuse=False, share=share)
    ex.mode = mode
    return ex


class Prefill:
    def __init__(self, decode_ex, widths=None):
        self.decode = decode_ex
        ws = widths if widths is not None else default_widths(decode_ex.device)
        self.widths = tuple(sorted({int(w) for w in ws if 1 <= int(w) <= decode_ex.ctx}, reverse=True))
        self.runners: dict[int, object] = {}
        share = [decode_ex.plan]
        try:
            for w in self.widths:
                prog = chunk_program(decode_ex.program, w, "kv")
                ex = chunk_executor(decode_ex.mode, decode_ex.device, prog, decode_ex.caps, share)
                self.runners[w] = ex
                if len(share) == 1:
                    share = [decode_ex.plan, ex.plan]   # the widest chunk's activations for the rest
        except BaseException:
            self.close()
            raise
        self.chunks: list[ChunkRun] = []     # every chunk run since the caller last cleared it

    def run(self, tokens, pos0: int, should_stop=None) -> int | None:
        """Fill the KV cache for tokens at positions pos0..; returns how many were covered (a
        prefix: the caller runs the rest through the decode step), or None when should_stop()
        turned true before a chunk."""
        done = 0
        for w, n in split_prompt(len(tokens), self.widths, self.decode.ctx - pos0):
            if should_stop is not None and should_stop():
                return None
            ex = self.runners[w]
            ids = ex.plan.slices[(TOKENS, "data")]
            real = [int(t) for t in tokens[done:done + n]]
            ids.buffer.write_u32(ids.offset // 4, real + real[-1:] * (w - n))   # padding rows
            ex.step(int(tokens[done]), pos0 + done)
            self.chunks.append(ChunkRun(w, n, ex.token_stats[-1]))
            ex.token_stats.clear()
            done += n
        return done

    def region_stats(self) -> dict[int, list[dict]]:
        return {w: ex.region_stats() for w, ex in self.runners.items()}

    def close(self) -> None:
        for ex in self.runners.values():
            ex.close()
        self.runners = {}

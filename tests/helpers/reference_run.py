"""An executor's greedy decode checked step by step against the numpy Reference."""

from __future__ import annotations

import numpy as np


def greedy_against_reference(ex, ref, steps: int, first: int = 7):
    """Feed the executor's own greedy tokens; compare logits and token with the reference each step.
    An f16 KV cache rounds k and v as stored: a last-bit difference in a k before the rounding can
    move it by one f16 step (1e-3 relative), hence the looser bound (f32 caches keep 1e-4).
    Returns (tokens, logits per step)."""
    f16 = any(v.dtype == "f16" for v in ex.program.values.values() if v.kind == "state")
    tol = 2e-3 if f16 else 1e-4
    tok, logits, toks = first, [], []
    ref.reset()
    for pos in range(steps):
        r = ref.step(tok, pos)
        nxt = ex.step(tok, pos)
        got = ex.read_logits()
        rel = np.abs(got - r["logits"]).max() / np.abs(r["logits"]).max()
        assert rel <= tol, f"{ex.mode} step {pos}: logits rel err {rel:.2e}"
        assert nxt == int(r["next_token"][0]), f"{ex.mode} step {pos}: token {nxt} != reference"
        logits.append(got)
        toks.append(nxt)
        tok = nxt
    return toks, logits


def replay_host_work(ex, steps: int = 4) -> set[tuple]:
    """The host's Vulkan calls of each of `steps` steps (descriptor writes, set allocations,
    recordings, recorded commands, recorded dispatches, submits), as a set: a replayed step's
    steady state is {(0, 0, 0, 0, 0, 1)}."""
    for pos in range(steps):
        ex.step(3, pos)
    return {
        (
            c.descriptor_writes,
            c.descriptor_set_allocations,
            c.command_buffer_recordings,
            c.recorded_commands,
            c.dispatches,
            c.submits,
        )
        for c in (s.counters for s in ex.token_stats)
    }

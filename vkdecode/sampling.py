"""The sampler's numpy twin (shaders/sample.comp implements the same steps on the GPU).

Counter-based RNG: u(seed, pos, i) = hash(hash(hash(seed) ^ pos) ^ i), a 32-bit integer hash, so a
draw depends only on what the step buffer holds, and replay stays step-invariant. Selection by
Gumbel-max over the kept set is an exact draw from softmax(l / temp) restricted to that set.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusion.ir import STEP_POS, STEP_SEED, STEP_TEMP, STEP_TOP_K, STEP_TOP_P
from vkdecode.errors import UsageError


@dataclass(frozen=True)
class SamplingParams:
    temp: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int = 0

    def __post_init__(self):
        if self.temp < 0 or self.top_k < 0 or not 0.0 < self.top_p <= 1.0:
            raise UsageError(
                f"bad sampling parameters: temp {self.temp} (>= 0), top_k {self.top_k} "
                f"(>= 0), top_p {self.top_p} (in (0, 1])"
            )

    @property
    def greedy(self) -> bool:
        return self.temp <= 0.0

    def step_words(self) -> tuple[int, int, int, int]:
        """Words STEP_SEED .. STEP_TOP_P of the step buffer."""
        f = np.array([self.temp, self.top_p], dtype=np.float32).view(np.uint32)
        return (self.seed & 0xFFFFFFFF, int(f[0]), self.top_k, int(f[1]))


assert (STEP_TEMP, STEP_TOP_K, STEP_TOP_P) == (STEP_SEED + 1, STEP_SEED + 2, STEP_SEED + 3)


def hash32(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint32).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint32(16)
        x *= np.uint32(0x7FEB352D)
        x ^= x >> np.uint32(15)
        x *= np.uint32(0x846CA68B)
        x ^= x >> np.uint32(16)
    return x


def uniforms(seed: int, pos: int, n: int) -> np.ndarray:
    """(0, 1) floats, exactly what the shader computes: (h >> 8) + 0.5 scaled by 2^-24."""
    base = hash32(hash32(np.array([seed], np.uint32)) ^ np.uint32(pos))
    h = hash32(base ^ np.arange(n, dtype=np.uint32))
    return ((h >> np.uint32(8)).astype(np.float32) + np.float32(0.5)) * np.float32(2.0**-24)


def ordered_keys(x: np.ndarray) -> np.ndarray:
    """uint32 keys that sort like the floats (the shader's radix select works on these)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32)
    return np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000)).astype(np.uint32)


def sample_logits(logits: np.ndarray, step: np.ndarray) -> int:
    logits = np.asarray(logits, dtype=np.float32)
    seed, temp_bits, top_k, top_p_bits = (int(w) for w in step[STEP_SEED : STEP_TOP_P + 1])
    temp = float(np.uint32(temp_bits).view(np.float32))
    top_p = float(np.uint32(top_p_bits).view(np.float32))
    if temp <= 0.0:
        return int(np.argmax(logits))
    keys = ordered_keys(logits)
    n = logits.size
    kept = np.ones(n, bool)
    if 0 < top_k < n:
        kth = np.sort(keys)[n - top_k]  # the k-th largest key; ties stay in
        kept = keys >= kth
    if top_p < 1.0:
        m = logits.max()
        p = np.where(kept, np.exp((logits.astype(np.float64) - m) / temp), 0.0)
        order = np.argsort(-logits, kind="stable")
        cum = np.cumsum(p[order])
        cut = int(np.searchsorted(cum, top_p * cum[-1]))  # first index reaching the mass
        kept &= keys >= keys[order[min(cut, n - 1)]]
    u = uniforms(seed, int(step[STEP_POS]), n)
    score = logits / np.float32(temp) - np.log(-np.log(u))
    return int(np.argmax(np.where(kept, score, -np.inf)))

"""Long runs: 10,000 tokens of fused replay through stream_generate on a tiny model (ctx 256, a new
generation whenever the context is full) keep per-token latency, process RSS, live Vulkan objects
and device memory flat; 50 load / generate / close cycles on one Device return live objects and
device memory to their baseline.

The soak prints its figures and writes them as JSON to $VKDECODE_SOAK_JSON when set. Timing
assertions are loose (CI machines are noisy): a leak that grows per token shows as a trend long
before it could pass them."""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.generate import stream_generate

SOAK_TOKENS, SOAK_CTX = 10_000, 256
CYCLES = 50


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


def rss_bytes() -> int:
    """Resident set size from /proc/self/statm (pages), without psutil."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def slope_per_1000(y: list[float]) -> float:
    """Least-squares slope of y over its index, per 1000 samples."""
    x = np.arange(len(y), dtype=np.float64)
    return float(np.polyfit(x, np.asarray(y, np.float64), 1)[0] * 1000)


@pytest.mark.timeout(300)
def test_soak_10k_tokens_fused_replay(device, tiny):
    lat_us: list[float] = []  # per generated token: time since the previous one
    cycles = []  # per generation: median latency, rss, live objects, bytes
    with vkdecode.load(tiny, device=device, mode="fused", ctx=SOAK_CTX) as model:
        ex, tok = model.executor, model.tokenizer
        vocab = model.loaded.args.vocab_size
        t_start = time.perf_counter()
        while len(lat_us) < SOAK_TOKENS:
            first = 3 + len(cycles) % (vocab - 3)  # a different prompt every generation
            n = min(SOAK_CTX, SOAK_TOKENS - len(lat_us))
            t = time.perf_counter()
            got = 0
            for r in stream_generate(ex, tok, [first], max_tokens=n, stop_at_eos=False):
                now = time.perf_counter()
                lat_us.append((now - t) * 1e6)
                t = now
                got += 1
            assert got == n and r.finish_reason == "length"
            cycles.append(
                {
                    "median_us": statistics.median(lat_us[-got:]),
                    "rss": rss_bytes(),
                    "live": device.live_objects(),
                    "bytes": device.allocated_bytes,
                    "stats_kept": len(ex.token_stats),
                }
            )
        wall = time.perf_counter() - t_start
    warm = cycles[2:]  # the first generations warm caches and the allocator
    meds = [c["median_us"] for c in warm]
    figures = {
        "tokens": len(lat_us),
        "ctx": SOAK_CTX,
        "generations": len(cycles),
        "wall_s": round(wall, 2),
        "median_us_per_token": statistics.median(lat_us),
        "latency_slope_us_per_1000_tokens": slope_per_1000(lat_us),
        # per-generation medians: robust to the odd slow token (a noisy CI neighbour)
        "generation_median_slope_us_per_1000_tokens": slope_per_1000(meds) / (len(lat_us) / len(cycles)),
        "first_generations_median_us": statistics.median(meds[:5]),
        "last_generations_median_us": statistics.median(meds[-5:]),
        "rss_mib_start": warm[0]["rss"] / 2**20,
        "rss_mib_end": warm[-1]["rss"] / 2**20,
        "rss_growth_mib": (warm[-1]["rss"] - warm[0]["rss"]) / 2**20,
        # the allocator and driver settle over the first few thousand tokens; a leak keeps growing
        "rss_growth_second_half_mib": (warm[-1]["rss"] - warm[len(warm) // 2]["rss"]) / 2**20,
        "live_objects_start": warm[0]["live"],
        "live_objects_end": warm[-1]["live"],
        "device_bytes_start": warm[0]["bytes"],
        "device_bytes_end": warm[-1]["bytes"],
        "token_stats_kept": cycles[-1]["stats_kept"],
    }
    print("\nsoak:", json.dumps(figures, indent=2))
    if os.environ.get("VKDECODE_SOAK_JSON"):
        Path(os.environ["VKDECODE_SOAK_JSON"]).write_text(json.dumps(figures, indent=2))
    assert len(lat_us) == SOAK_TOKENS
    assert all(c["live"] == warm[0]["live"] for c in warm), "live Vulkan objects changed during the soak"
    assert all(c["bytes"] == warm[0]["bytes"] for c in warm), "device memory changed during the soak"
    assert figures["rss_growth_mib"] < 16, f"RSS grew {figures['rss_growth_mib']:.1f} MiB over the soak"
    assert figures["rss_growth_second_half_mib"] < 4, f"RSS still growing: {figures}"
    assert figures["token_stats_kept"] <= SOAK_CTX, "per-token stats pile up across generations"
    assert figures["last_generations_median_us"] < 1.5 * figures["first_generations_median_us"] + 500


def test_load_generate_close_cycles_return_to_baseline(device, tiny):
    def cycle(i: int) -> list[int]:
        with vkdecode.load(
            tiny, device=device, mode=("fused", "replay-nofuse", "unfused")[i % 3], ctx=32
        ) as model:
            return [r.token for r in model.stream_generate(prompt_ids=[5, 6, 7], max_tokens=3)]

    want = [cycle(i) for i in range(3)]  # every mode once: pipelines cached, staging made
    base_live, base_bytes, base_rss = device.live_objects(), device.allocated_bytes, rss_bytes()
    for i in range(CYCLES):
        assert cycle(i) == want[i % 3]
        assert device.live_objects() == base_live, f"cycle {i}: live objects {device.live_objects()}"
        assert device.allocated_bytes == base_bytes, f"cycle {i}: device memory {device.allocated_bytes}"
    growth = (rss_bytes() - base_rss) / 2**20
    print(
        f"\n{CYCLES} load/generate/close cycles: live objects {base_live}, device memory "
        f"{base_bytes / 2**20:.1f} MiB (unchanged), RSS growth {growth:.1f} MiB"
    )
    assert growth < 64

"""vkdecode/benchmark/memory.py: the /proc readers, the model file's size, issue 33's targets for
both device types, and `vkdecode bench`'s memory record on a real tiny GGUF."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode import benchmark as bench
from vkdecode.benchmark.memory import (
    memory_note,
    model_file_bytes,
    reset_peak_rss,
    status_bytes,
    target,
)

MB = 10**6


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


def test_cpu_target_reads_the_peak_against_2_5_files():
    assert target("cpu", 100 * MB, 250 * MB, 10**12) == {
        "target": "peak_rss <= 2.5 x file_bytes",
        "target_limit_bytes": 250 * MB,
        "target_met": True,  # the RSS after the load does not count: the peak is the whole story
    }
    assert target("cpu", 100 * MB, 250 * MB + 1, 0)["target_met"] is False


@pytest.mark.parametrize("device_type", ["discrete", "integrated"])
def test_gpu_target_reads_the_rss_after_load_against_file_plus_300_mb(device_type):
    t = target(device_type, 100 * MB, 10**12, 400 * MB)
    assert t["target"] == "rss_after_load <= file_bytes + 300 MB"
    assert t["target_limit_bytes"] == 400 * MB and t["target_met"] is True  # the peak does not count
    assert target(device_type, 100 * MB, 0, 400 * MB + 1)["target_met"] is False


def test_no_file_no_verdict():
    for device_type in ("cpu", "discrete"):
        t = target(device_type, None, 10, 10)
        assert t["target_limit_bytes"] is None and t["target_met"] is None and t["target"]


def test_memory_note_for_each_device_type():
    rec = {"file_bytes": int(98.4 * MB), "device_allocated_bytes": 120 * MB, "weight_bytes": 98 * MB}
    cpu = dict(rec, device_type="cpu", peak_rss=int(182.1 * MB), rss_after_load=170 * MB, target_met=True)
    assert "file 98.4 MB, host peak RSS 182.1 MB (1.85x the file; target <= 2.5x on a CPU device: met)" in (
        memory_note(cpu)
    )
    assert "device 120.0 MB allocated (98.0 MB weights)" in memory_note(cpu)
    gpu = dict(
        rec, device_type="discrete", peak_rss=500 * MB, rss_after_load=int(448.4 * MB), target_met=False
    )
    assert "host RSS after load 448.4 MB (file + 350.0 MB; target <= file + 300.0 MB on a GPU: not met)" in (
        memory_note(gpu)
    )
    shape = dict(cpu, file_bytes=None, target_met=None)
    assert "no model file (random weights), host peak RSS 182.1 MB" in memory_note(shape)


def test_status_bytes_follow_an_allocation():
    before = status_bytes("VmRSS")
    block = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB, every page written
    grown = status_bytes("VmRSS")
    assert grown - before > 60 << 20 and status_bytes("VmHWM") >= grown
    del block
    with pytest.raises(KeyError):
        status_bytes("NoSuchField")


def test_reset_peak_rss_forgets_a_freed_peak():
    block = np.ones(64 << 20, dtype=np.uint8)
    del block
    high = status_bytes("VmHWM")
    if not reset_peak_rss():
        pytest.skip("/proc/self/clear_refs cannot be written here")
    assert status_bytes("VmHWM") < high - (48 << 20)


def test_model_file_bytes(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x" * 123)
    assert model_file_bytes(str(f)) == 123
    d = tmp_path / "hf"
    d.mkdir()
    (d / "model-00001-of-00002.safetensors").write_bytes(b"x" * 10)
    (d / "model-00002-of-00002.safetensors").write_bytes(b"x" * 5)
    (d / "config.json").write_text("{}")
    assert model_file_bytes(str(d)) == 15  # the weights' files, not the directory's inode
    assert model_file_bytes("random weights") is None


def test_run_bench_records_memory_after_the_first_build(device, tiny_gguf):
    model = bench.file_model(tiny_gguf, ctx=64, prompt_tokens=2)
    res = bench.run_bench(device, model, ["fused", "unfused"], n=2, reps=1, warmup=0, copy_bytes=0)
    m = res["memory"]
    assert m["device_type"] == device.info.device_type
    assert m["file_bytes"] == os.path.getsize(tiny_gguf)
    assert m["peak_rss"] >= m["rss_after_load"] > 0
    # the device holds every packed weight (and the rope table) besides the KV cache and activations
    assert m["device_allocated_bytes"] > m["weight_bytes"] >= model.size_bytes > 0
    assert (
        m["target_met"]
        == target(m["device_type"], m["file_bytes"], m["peak_rss"], m["rss_after_load"])["target_met"]
    )
    assert m["target_met"] is not None and any("VmHWM" in n for n in m["notes"])
    # measured once the first mode's executor was built: its allocations are gone by the end
    assert device.allocated_bytes < m["device_allocated_bytes"]

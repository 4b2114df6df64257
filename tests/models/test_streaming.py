"""Streamed loading (models/lazy.py): the API packs each weight just before its upload and keeps no
host copy; streamed and eager loads upload the same bytes and decode the same tokens; a load's
peak host memory stays within a bound of the file's size."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import vkdecode
from tests.helpers.make_models import tiny_hf_model, write_gguf
from vkdecode.executors.plan import MemoryPlan
from vkdecode.models import loader
from vkdecode.models.lazy import LazyWeight
from vkdecode.models.weights import load_weights
from vkdecode.quant import DTYPES, quantize
from vkdecode.quant.blocks import packed_part_bytes

MODELS = ("gguf-llama-q8_0", "hf-qwen2-f32", "hf-gemma3-f16", "hf-qwen3moe-f16", "gguf-qwen3moe-q4_0")


def model_path(which: str, models_dir) -> str:
    fmt, arch, dtype = which.split("-")
    if fmt == "gguf":
        d = tiny_hf_model(arch, models_dir, tied=True)
        return str(write_gguf(d, models_dir / f"{arch}-tied.{dtype}.gguf", dtype))
    return str(tiny_hf_model(arch, models_dir, dtype=dtype))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_part_bytes_known_before_packing(dtype):
    w = quantize(np.random.default_rng(0).standard_normal((6, 512)).astype(np.float32), dtype)
    assert w.part_bytes == packed_part_bytes(dtype, w.shape)


@pytest.mark.parametrize("which", MODELS)
def test_lazy_weights_announce_what_they_pack(which, models_dir):
    _, lazy, _ = load_weights(model_path(which, models_dir), stream=True)
    _, eager, _ = load_weights(model_path(which, models_dir))
    assert set(lazy) == set(eager) and all(isinstance(w, LazyWeight) for w in lazy.values())
    for name, w in lazy.items():
        p = w.packed()  # checks dtype, shape and part_bytes against what it announced
        assert (w.nbytes, w.dtype) == (eager[name].nbytes, eager[name].dtype), name
        assert all(np.array_equal(p.parts[k], eager[name].parts[k]) for k in p.parts), name


def test_api_keeps_no_packed_copy(device, models_dir, monkeypatch):
    """Every packed array is gone before the next weight is packed, and none outlives the load."""
    dead_before: list[bool] = []
    refs: list[weakref.ref] = []
    upload = MemoryPlan._upload

    def spy(self, name, pw, progress):
        dead_before.append(all(r() is None for r in refs))
        refs.extend(weakref.ref(a) for a in pw.parts.values())
        return upload(self, name, pw, progress)

    monkeypatch.setattr(MemoryPlan, "_upload", spy)
    with vkdecode.load(model_path("gguf-llama-q8_0", models_dir), device=device, ctx=64) as model:
        gc.collect()
        assert refs and all(dead_before) and all(r() is None for r in refs)
        assert all(isinstance(w, LazyWeight) for w in model.loaded.weights.values())
        assert not [
            x for w in model.loaded.weights.values() for x in vars(w).values() if isinstance(x, np.ndarray)
        ]


def load_and_decode(path: str, device) -> tuple[bool, dict, list[int]]:
    """-> (streamed?, the weights' bytes read back from the device, 6 greedy tokens)."""
    with vkdecode.load(path, device=device, ctx=64) as model:
        plan = model.executor.plan
        uploaded = {k: s.read() for k, s in plan.slices.items() if k[0] in plan.weight_bytes}
        tokens = [r.token for r in model.stream_generate("Hello, world", max_tokens=6)]
        return isinstance(model.loaded.weights["tok_embd"], LazyWeight), uploaded, tokens


@pytest.mark.parametrize("which", MODELS)
def test_streamed_and_eager_loads_agree(which, device, models_dir, monkeypatch):
    """The same bytes on the device and the same greedy tokens through the API, either way."""
    path = model_path(which, models_dir)
    streamed = load_and_decode(path, device)
    real = loader.load_model  # the API's own path, with the eager weights the bench and tests use
    monkeypatch.setattr(loader, "load_model", lambda *a, **kw: real(*a, **{**kw, "stream": False}))
    eager = load_and_decode(path, device)
    assert streamed[0] and not eager[0]
    assert streamed[1].keys() == eager[1].keys() and streamed[1] == eager[1]
    assert streamed[2] and streamed[2] == eager[2]


# ---------------------------------------------------------------- peak host memory


CHILD = """
import json, sys
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
import vkdecode, vkdecode.executors.decoder, vkdecode.models.loader
from vkdecode.vk.device import Device
dev = Device()
overhead = hwm()  # the interpreter, numpy, vkdecode and the device: before the load
model = vkdecode.load(sys.argv[1], device=dev, ctx=64, prefill=False)
print(json.dumps({"overhead": overhead, "peak": hwm(), "weights": sum(model.executor.plan.weight_bytes.values())}))
"""


def test_load_peak_memory_bound(tmp_path_factory):
    """A load's peak RSS (VmHWM, in a fresh child: nothing else the test process did counts) above
    the interpreter + device overhead stays under the issue's 2.5x the file on lavapipe, where the
    device's copy of the weights is host memory too. SmolLM2-135M's shape in q8_0 (144 MB):
    1.7x streamed, 3.1x when the load kept a packed copy of every weight and the file's pages."""
    path = tmp_path_factory.mktemp("mem") / "smollm2.q8_0.gguf"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    write = [
        sys.executable,
        "-m",
        "bench.shape_gguf",
        "--shape",
        "smollm2-135m",
        "--quant",
        "q8_0",
        str(path),
    ]
    subprocess.run(write, check=True, cwd=root, capture_output=True)
    size = os.path.getsize(path)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], check=True, cwd=root, capture_output=True, text=True
    )
    r = json.loads(done.stdout.strip().splitlines()[-1])
    assert r["weights"] > 0.9 * size
    assert r["peak"] - r["overhead"] < 2.5 * size, (r, size)

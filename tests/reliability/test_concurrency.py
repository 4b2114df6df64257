"""Several models at once: two models of different families open on one Device with their
generations interleaved token by token give exactly the tokens each gives alone; two Devices in two
threads generate at the same time, each as it does alone (docs/design.md, "Several models, and threads")."""

from __future__ import annotations

import threading

import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.generate import stream_generate

PROMPT, N = [5, 17, 42, 9], 24


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return {
        "llama": str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0")),
        "qwen3": str(tiny_hf_model("qwen3", d)),
        "qwen2": str(write_gguf(tiny_hf_model("qwen2", d), d / "qwen2.q8_0.gguf", "q8_0")),
    }


def tokens(model) -> list[int]:
    return [r.token for r in stream_generate(model.decoder, model.tokenizer, PROMPT, N, stop_at_eos=False)]


@pytest.mark.parametrize(
    "a,b",
    [(("llama", "fused"), ("qwen3", "fused")), (("qwen2", "replay-nofuse"), ("llama", "unfused"))],
    ids=["fused+fused", "nofuse+unfused"],
)
def test_two_models_on_one_device_interleaved(device, models, a, b):
    with (
        vkdecode.load(models[a[0]], device=device, mode=a[1], ctx=64) as ma,
        vkdecode.load(models[b[0]], device=device, mode=b[1], ctx=64) as mb,
    ):
        alone = {"a": tokens(ma), "b": tokens(mb)}
        ga = stream_generate(ma.decoder, ma.tokenizer, PROMPT, N, stop_at_eos=False)
        gb = stream_generate(mb.decoder, mb.tokenizer, PROMPT, N, stop_at_eos=False)
        got = {"a": [], "b": []}
        for ra, rb in zip(ga, gb):  # one token of each in turn, both pipelines in flight
            got["a"].append(ra.token)
            got["b"].append(rb.token)
        assert got == alone
        assert alone["a"] != alone["b"]  # different models: the comparison means something


def test_two_devices_in_two_threads(models):
    """One Device per thread, each with its own model: no shared Vulkan or Python state in the way.

    The Devices are created and destroyed on the main thread, the loads, generations and model
    closes run in the threads at the same time. Why: Debian 12's validation layer (1.3.239) keeps
    its per-instance and per-device state in a map that vkCreateInstance / vkCreateDevice and their
    destroys write without a lock while every other call reads it (Vulkan-ValidationLayers issue
    4391); one thread destroying its device while the other destroyed a pipeline crashed CI once.
    Without the layer, creating and destroying different devices needs no external sync."""
    from vkdecode.vk import Device

    def work(dev, name: str, out: dict) -> None:
        try:
            with vkdecode.load(models[name], device=dev, ctx=64) as m:
                out[name] = [tokens(m) for _ in range(3)]
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            out[name] = e

    with Device() as dev:  # the expected tokens, one model at a time
        want = {}
        for name in ("llama", "qwen3"):
            with vkdecode.load(models[name], device=dev, ctx=64) as m:
                want[name] = tokens(m)
    out: dict = {}
    devices = {"llama": Device(), "qwen3": Device()}
    threads = [threading.Thread(target=work, args=(devices[n], n, out)) for n in devices]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    # a hung thread keeps its Device open: closing it under the thread could crash the suite
    assert not any(t.is_alive() for t in threads), "a generating thread hung"
    errors = {}
    for name, dev in devices.items():
        errors[name] = list(dev.validation_errors)
        dev.close()
    for name in devices:
        assert not isinstance(out[name], BaseException), out[name]
        assert out[name] == [want[name]] * 3
        assert errors[name] == []

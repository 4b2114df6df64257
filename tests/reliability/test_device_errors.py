"""GPU failures surface as clear VkDecodeErrors, never a hang, and a load that fails half way frees
what it allocated: a fence wait that times out (a real long-running dispatch), VK_ERROR_DEVICE_LOST
from vkQueueSubmit and VK_TIMEOUT from vkWaitForFences (simulated through the module's `lib`),
VK_ERROR_OUT_OF_DEVICE_MEMORY from vkAllocateMemory, a shader that fails to compile mid-load."""

from __future__ import annotations

import shutil
import time

import pytest

import vkdecode
from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from vkdecode.errors import DeviceMemoryError, VkDecodeError, VulkanError
from vkdecode.vk import write_descriptor_set

SPIN = """#version 450
// Busy loop: a dispatch that runs for a while, so a zero-timeout fence wait must time out.
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint ITERS = 1;
layout(binding = 0) buffer B { float v[]; };
void main() {
    float x = float(gl_GlobalInvocationID.x);
    for (uint i = 0u; i < ITERS; i++) { x = x * 0.9999999 + 1e-7; }
    v[gl_GlobalInvocationID.x] = x;
}
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return str(write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0"))


class FakeLib:
    """Stands in for `vulkan.lib` in one vkdecode.vk module: every call goes to the real entry
    point except the ones a test overrides."""

    def __init__(self, real, **overrides):
        self._real, self._over = real, overrides

    def __getattr__(self, name):
        return self._over.get(name) or getattr(self._real, name)


def held(device) -> dict:
    """What a model holds on the device: live wrappers other than the per-device pipeline cache,
    and bytes of device memory other than the device's own staging buffer (made on first upload)."""
    staging = device._transfer[0].nbytes if device._transfer and device._transfer[0].memory else 0
    objs = {k: v for k, v in device.live_objects().items() if k != "Pipeline"}
    return {**objs, "bytes": device.allocated_bytes - staging}


# ---------------------------------------------------------------- fence waits


def test_wait_timeout_on_a_running_dispatch_raises(device, tmp_path):
    src = tmp_path / "spin.comp"
    src.write_text(SPIN)
    buf = device.buffer(64 * 8 * 4, name="spin")
    pool = device.descriptor_pool(1, 1)
    cmd = device.command_buffer()
    try:
        pipe = device.pipeline(str(src), spec=(1 << 22,), n_bindings=1)
        dset = pool.allocate(pipe)
        write_descriptor_set(device, dset, [(buf, 0, buf.size)])
        cmd.begin()
        cmd.bind(pipe, dset)
        cmd.dispatch(8)
        cmd.end()
        fence = device.submit([cmd], wait=False)
        t0 = time.perf_counter()
        with pytest.raises(VulkanError, match="did not finish within 0 s"):
            device.wait_fence(fence, timeout_s=0)
        with pytest.raises(VulkanError, match="VK_TIMEOUT"):
            device.wait(timeout_s=0)
        assert time.perf_counter() - t0 < 1.0  # a timeout returns at once, it does not block
        device.wait()  # the work still finishes and is waited for
    finally:
        for obj in (cmd, pool, buf):
            obj.close()


@pytest.mark.parametrize("mode", ["fused", "unfused"])
def test_device_lost_at_submit_surfaces_through_generate(device, tiny, monkeypatch, mode):
    import vkdecode.vk.device as vkdev
    from vkdecode.vk.ffi import vk

    with vkdecode.load(tiny, device=device, mode=mode, ctx=32) as model:
        want = [r.token for r in model.stream_generate("Hello", max_tokens=6)]
        n = [0]

        def submit(*a):
            n[0] += 1  # the 4th submit: past the prompt, inside the pipelined decode loop
            return vk.VK_ERROR_DEVICE_LOST if n[0] >= 4 else vkdev.lib._real.vkQueueSubmit(*a)

        monkeypatch.setattr(vkdev, "lib", FakeLib(vkdev.lib, vkQueueSubmit=submit))
        with pytest.raises(VkDecodeError, match="vkQueueSubmit failed: VK_ERROR_DEVICE_LOST"):
            list(model.stream_generate("Hello", max_tokens=6))
        monkeypatch.undo()
        # the device was fine all along: the same model decodes again, the same tokens
        assert [r.token for r in model.stream_generate("Hello", max_tokens=6)] == want


def test_fence_timeout_surfaces_through_generate(device, tiny, monkeypatch):
    import vkdecode.vk.device as vkdev
    from vkdecode.vk.ffi import vk

    with vkdecode.load(tiny, device=device, ctx=32) as model:
        monkeypatch.setattr(vkdev, "lib", FakeLib(vkdev.lib, vkWaitForFences=lambda *a: vk.VK_TIMEOUT))
        with pytest.raises(VulkanError, match="did not finish within"):
            list(model.stream_generate("Hello", max_tokens=4))
        monkeypatch.undo()  # close() below waits for real


def test_device_lost_in_the_cli(capsys, tiny, monkeypatch):
    import vkdecode.vk.device as vkdev
    from vkdecode.cli import main
    from vkdecode.vk.ffi import vk

    monkeypatch.setattr(vkdev, "lib", FakeLib(vkdev.lib, vkQueueSubmit=lambda *a: vk.VK_ERROR_DEVICE_LOST))
    rc = main(["run", "--model", tiny, "--prompt", "Hi", "--max-tokens", "2", "--ctx", "16", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1 and err.startswith("error: ") and "VK_ERROR_DEVICE_LOST" in err and "Traceback" not in err


# ---------------------------------------------------------------- failed loads free everything


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_out_of_device_memory_names_the_bytes_and_frees(device, tiny, monkeypatch, nth):
    import vkdecode.vk.memory as vkmem
    from vkdecode.vk.ffi import vk

    vkdecode.load(tiny, device=device, ctx=32).close()  # the staging buffer exists from here on
    before = held(device)
    n = [0]

    def alloc(dev, info, cb, out):
        # from the nth allocation of the load on, memory is out (host arena, weights, activations):
        # every memory type Buffer falls back to fails too (an H100 offers several device-local ones)
        n[0] += 1
        return (
            vk.VK_ERROR_OUT_OF_DEVICE_MEMORY
            if n[0] >= nth
            else vkmem.lib._real.vkAllocateMemory(dev, info, cb, out)
        )

    monkeypatch.setattr(vkmem, "lib", FakeLib(vkmem.lib, vkAllocateMemory=alloc))
    with pytest.raises(DeviceMemoryError) as e:
        vkdecode.load(tiny, device=device, ctx=32)
    monkeypatch.undo()
    msg = str(e.value)
    assert isinstance(e.value, VkDecodeError) and "out of device memory" in msg
    assert "bytes" in msg and "VK_ERROR_OUT_OF_DEVICE_MEMORY" in msg and "device-local" in msg
    assert held(device) == before


def test_shader_failure_mid_load_frees(tiny, monkeypatch, tmp_path):
    from vkdecode.errors import ShaderError
    from vkdecode.vk import Device
    from vkdecode.vk.shaders import shader_dir

    broken = tmp_path / "shaders"
    shutil.copytree(shader_dir(), broken)
    victim = broken / "argmax.comp"  # the last kernel of a greedy step: built last
    lines = victim.read_text().splitlines(keepends=True)
    victim.write_text(lines[0] + "this is not glsl;\n" + "".join(lines[1:]))
    monkeypatch.setenv("VKDECODE_SHADER_DIR", str(broken))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with Device() as dev:  # its own device: the session device has these pipelines cached
        for mode in ("fused", "unfused"):
            with pytest.raises(ShaderError, match=r"argmax\.comp:2"):
                vkdecode.load(tiny, device=dev, mode=mode, ctx=32)
            assert held(dev) == {"bytes": 0}
        assert not dev.validation_errors

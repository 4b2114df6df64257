"""Device choice (pure, on fake DeviceInfo lists), probing of the real device, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.helpers.paths import ROOT
from vkdecode.errors import NoDeviceError, VulkanError
from vkdecode.vk.device import DeviceInfo, choose_device


def fake(index, name, kind):
    return DeviceInfo(index=index, name=name, vendor="x", vendor_id=0, device_id=0, device_type=kind)


FAKES = [
    fake(0, "llvmpipe (LLVM 15)", "cpu"),
    fake(1, "Intel UHD 770", "integrated"),
    fake(2, "NVIDIA H100 80GB HBM3", "discrete"),
    fake(3, "virtio-gpu", "virtual"),
]


def test_choice_prefers_discrete_then_integrated_then_virtual_then_cpu(monkeypatch):
    monkeypatch.delenv("VKDECODE_DEVICE", raising=False)
    assert choose_device(FAKES).index == 2
    assert choose_device([FAKES[0], FAKES[1], FAKES[3]]).index == 1
    assert choose_device([FAKES[0], FAKES[3]]).index == 3
    assert choose_device([FAKES[0]]).index == 0


def test_choice_override_by_index_substring_and_env(monkeypatch):
    monkeypatch.delenv("VKDECODE_DEVICE", raising=False)
    assert choose_device(FAKES, 0).index == 0
    assert choose_device(FAKES, "1").index == 1
    assert choose_device(FAKES, "LLVMPIPE").index == 0
    assert choose_device(FAKES, "h100").index == 2
    monkeypatch.setenv("VKDECODE_DEVICE", "intel")
    assert choose_device(FAKES).index == 1
    assert choose_device(FAKES, "virtio").index == 3  # an explicit selector beats the environment


@pytest.mark.parametrize("selector", [7, "7", "radeon"])
def test_choice_unknown_selector_lists_devices(selector):
    with pytest.raises(NoDeviceError) as e:
        choose_device(FAKES, selector)
    assert "H100" in str(e.value) and "llvmpipe" in str(e.value)
    assert e.value.exit_code == 2


def test_choice_of_nothing():
    with pytest.raises(NoDeviceError):
        choose_device([])


def test_device_info_is_complete(device):
    info = device.info
    assert info.device_type in ("discrete", "integrated", "virtual", "cpu", "other")
    for key in (
        "max_storage_buffer_range",
        "max_workgroup_size",
        "max_workgroup_count",
        "max_workgroup_invocations",
        "max_shared_memory",
        "max_push_constants",
        "timestamp_period",
        "min_storage_buffer_offset_alignment",
        "max_memory_allocation_size",
    ):
        assert key in info.limits, key
    assert len(info.limits["max_workgroup_size"]) == 3
    for key in (
        "storage_16bit",
        "float16",
        "storage_8bit",
        "int8",
        "subgroup_arithmetic",
        "subgroup_size_control",
        "push_descriptors",
        "timestamps",
    ):
        assert isinstance(info.features[key], bool), key
    assert info.features["subgroup_size"] >= 1 and isinstance(info.features["subgroup_ops"], list)
    assert info.memory_heaps and all(
        {"size", "device_local", "host_visible"} <= set(h) for h in info.memory_heaps
    )
    assert json.loads(json.dumps(info.as_dict()))["name"] == info.name
    if info.vendor_id == 0x10005 and "llvmpipe" in info.name:
        assert info.vendor == "Mesa (lavapipe)"


def test_check_validation_raises_and_clears(device):
    device.validation_errors.append("[fake] injected message")
    with pytest.raises(VulkanError, match="injected"):
        device.check_validation()
    assert device.validation_errors == []
    device.check_validation()


def _cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "vkdecode", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=False,
    )


def test_cli_devices_json(device):
    r = _cli("devices", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    names = [d["name"] for d in data["devices"]]
    assert device.info.name in names and data["chosen"] in [d["index"] for d in data["devices"]]


def test_cli_devices_table(device):
    r = _cli("devices")
    assert r.returncode == 0, r.stderr
    assert device.info.name in r.stdout and "max storage buffer range" in r.stdout and "*" in r.stdout


def test_cli_no_device_exit_code_2():
    r = _cli("devices", env={"VK_DRIVER_FILES": "/nonexistent", "VK_ICD_FILENAMES": "/nonexistent"})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "no Vulkan device" in r.stderr and "Traceback" not in r.stderr


def test_cli_main_maps_errors_to_exit_codes(monkeypatch, capsys):
    from vkdecode import cli

    monkeypatch.setenv("VKDECODE_DEVICE", "no-such-gpu-anywhere")
    assert cli.main(["devices"]) == 2
    assert "error: no Vulkan device matches" in capsys.readouterr().err


def test_coop2_is_asked_for_only_when_named(monkeypatch):
    """VKDECODE_COOP2=1 (bench/coop2_probe.py) chains VK_NV_cooperative_matrix2's features where the
    device has the extension (and no validation layer too old for it is on); otherwise nothing
    changes (lavapipe has no such extension)."""
    from vkdecode.vk import Device
    from vkdecode.vk.probe import COOP2_EXT

    for env in ("", "1"):
        monkeypatch.setenv("VKDECODE_COOP2", env)
        with Device() as dev:
            has = COOP2_EXT in dev._probe.extensions and not dev._probe.old_layer
            assert (COOP2_EXT in dev._probe.enable_exts) == (has and env == "1")
            assert dev.info.features["coop2"] in ((True, False) if has and env else (False,))

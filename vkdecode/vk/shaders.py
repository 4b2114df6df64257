"""GLSL -> SPIR-V through glslangValidator (vk/glslang.py picks which) with an on-disk cache, and
compute pipelines."""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import struct
import subprocess
import tempfile

from vkdecode.errors import ShaderError, VulkanError
from vkdecode.vk.ffi import NULL, check, cstr, ffi, lib, new, vk
from vkdecode.vk.glslang import COMPILER, compiler_for, needs_cm2, required_lanes, sources
from vkdecode.vk.pipeline_stats import executable_stats

__all__ = ["COMPILER", "Pipeline", "compile_shader", "shader_dir"]
_invocations = 0


def shader_dir() -> pathlib.Path:
    """VKDECODE_SHADER_DIR when set (shader development, tests of compile errors), else the
    checkout's shaders/ when running from one, else the installed vkdecode.shaders package."""
    if os.environ.get("VKDECODE_SHADER_DIR"):
        return pathlib.Path(os.environ["VKDECODE_SHADER_DIR"]).resolve()
    repo = pathlib.Path(__file__).resolve().parents[2] / "shaders"
    if (repo / "__init__.py").exists():
        return repo
    import importlib.resources

    return pathlib.Path(str(importlib.resources.files("vkdecode.shaders")))


def cache_dir() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "vkdecode"


def compiler_invocations() -> int:
    return _invocations


def _source_path(name: str) -> pathlib.Path:
    p = pathlib.Path(name)
    if p.suffix == ".comp" or p.is_absolute() or "/" in name:  # a path: tests and ad-hoc shaders
        return p.resolve()
    return shader_dir() / f"{name}.comp"


def required_subgroup_size(name: str) -> int:
    """REQUIRED_SUBGROUP_SIZE as the shader (or an include) defines it, else 0."""
    return required_lanes(sources(_source_path(name), [shader_dir()]))


def _define_args(defines: dict | None) -> list[str]:
    args = []
    for k, v in sorted((defines or {}).items()):
        if v is None or v is True:
            args.append(f"-D{k}")
        else:
            args.append(f"-D{k}={int(v) if isinstance(v, bool) else v}")
    return args


def extra_defines() -> dict:
    """VKDECODE_DEFINES=A,B=1: defines added to every shader, for A/B runs of a shader variant in a
    whole decode step (bench/README.md); unset in normal use."""
    out = {}
    for item in filter(None, (t.strip() for t in os.environ.get("VKDECODE_DEFINES", "").split(","))):
        k, _, v = item.partition("=")
        out[k] = v or None
    return out


def compile_shader(name: str, defines: dict | None = None) -> bytes:
    """SPIR-V for shaders/<name>.comp (or a .comp path), from the cache when source+defines+compiler match."""
    global _invocations
    src = _source_path(name)
    if not src.exists():
        raise ShaderError(f"shader {name!r} not found ({src})")
    texts = sources(src, [shader_dir()])
    compiler, version, env = compiler_for(src.name, texts)
    dargs = _define_args({**extra_defines(), **(defines or {})})
    h = hashlib.sha256()
    for path, text in texts.items():
        h.update(str(path.name).encode() + b"\0" + text + b"\0")
    h.update("\0".join(dargs).encode() + b"\0" + version.encode())
    cdir = cache_dir()
    out = cdir / f"{src.stem}-{h.hexdigest()[:24]}.spv"
    if out.exists():
        return out.read_bytes()
    cdir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".spv", dir=cdir)
    os.close(fd)
    target = "vulkan1.3" if needs_cm2(texts) else "vulkan1.1"  # glslang 15 makes no 1.1 SPIR-V of it
    cmd = [compiler, "-V", "--target-env", target, f"-I{shader_dir()}", *dargs, "-o", tmp, str(src)]
    _invocations += 1
    r = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if r.returncode != 0:
        os.unlink(tmp)
        msg = (r.stdout + r.stderr).strip()
        where = re.search(r"(\S+\.(?:comp|glsl)):(\d+):", msg)
        loc = f"{where.group(1)}:{where.group(2)}" if where else str(src)
        raise ShaderError(f"shader {src.name} failed to compile at {loc} (defines {dargs}):\n{msg}")
    os.replace(tmp, out)  # atomic: a concurrent process never reads a half-written file
    return out.read_bytes()


def _spec_bytes(spec: tuple) -> bytes:
    out = b""
    for v in spec:
        if isinstance(v, float):
            out += struct.pack("<f", v)
        elif isinstance(v, (bool, int)) or hasattr(v, "__index__"):
            v = int(v)
            out += struct.pack("<i" if v < 0 else "<I", v)
        else:
            raise ShaderError(f"specialization constant {v!r} is neither int nor float")
    return out


class Pipeline:
    """A compute pipeline: set 0 = n_bindings storage buffers, optional push constants, spec constants."""

    def __init__(
        self,
        device,
        shader: str,
        spec: tuple = (),
        defines: dict | None = None,
        n_bindings: int = 1,
        push_size: int = 0,
        key=None,
    ):
        self.device, self.shader, self.spec, self.key = device, shader, tuple(spec), key
        self.n_bindings, self.push_size = n_bindings, push_size
        self.handle = self.layout = self.set_layout = None
        if push_size > device.info.limits["max_push_constants"] or push_size % 4:
            raise VulkanError(
                f"push_size {push_size} must be a multiple of 4 and at most "
                f"maxPushConstantsSize ({device.info.limits['max_push_constants']})"
            )
        code = compile_shader(shader, defines)
        device._register(self)
        try:
            dev = device.handle
            binds = ffi.new("VkDescriptorSetLayoutBinding[]", max(n_bindings, 1))
            for i in range(n_bindings):
                binds[i].binding = i
                binds[i].descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
                binds[i].descriptorCount = 1
                binds[i].stageFlags = vk.VK_SHADER_STAGE_COMPUTE_BIT
            sl_info = new(
                "VkDescriptorSetLayoutCreateInfo*", {"bindingCount": n_bindings, "pBindings": binds}
            )
            out = ffi.new("VkDescriptorSetLayout*")
            check("vkCreateDescriptorSetLayout", lib.vkCreateDescriptorSetLayout(dev, sl_info, NULL, out))
            self.set_layout = out[0]
            set_layouts = ffi.new("VkDescriptorSetLayout[]", [self.set_layout])
            pcr = ffi.new(
                "VkPushConstantRange*",
                {"stageFlags": vk.VK_SHADER_STAGE_COMPUTE_BIT, "offset": 0, "size": push_size},
            )
            pl_info = new(
                "VkPipelineLayoutCreateInfo*",
                {
                    "setLayoutCount": 1,
                    "pSetLayouts": set_layouts,
                    "pushConstantRangeCount": 1 if push_size else 0,
                    "pPushConstantRanges": pcr if push_size else NULL,
                },
            )
            out = ffi.new("VkPipelineLayout*")
            check("vkCreatePipelineLayout", lib.vkCreatePipelineLayout(dev, pl_info, NULL, out))
            self.layout = out[0]
            words = ffi.from_buffer("uint32_t[]", code)  # held until vkCreateShaderModule returns
            sm_info = new("VkShaderModuleCreateInfo*", {"codeSize": len(code), "pCode": words})
            mod = ffi.new("VkShaderModule*")
            check(f"vkCreateShaderModule({shader})", lib.vkCreateShaderModule(dev, sm_info, NULL, mod))
            # Every nested pointer below (entry name, spec map, spec data) is a local that outlives the call.
            entry = cstr("main")
            data = _spec_bytes(self.spec)
            spec_data = ffi.new("char[]", data) if data else NULL
            entries = ffi.new("VkSpecializationMapEntry[]", max(len(self.spec), 1))
            for i in range(len(self.spec)):
                entries[i].constantID, entries[i].offset, entries[i].size = i, 4 * i, 4
            spec_info = ffi.new(
                "VkSpecializationInfo*",
                {
                    "mapEntryCount": len(self.spec),
                    "pMapEntries": entries,
                    "dataSize": len(data),
                    "pData": spec_data,
                },
            )
            stats = bool(device.info.features.get("pipeline_stats"))
            ci = new(
                "VkComputePipelineCreateInfo*",
                {
                    "layout": self.layout,
                    "basePipelineIndex": -1,
                    "flags": _CAPTURE_STATISTICS if stats else 0,
                },
            )
            ci.stage.sType = vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO
            ci.stage.stage = vk.VK_SHADER_STAGE_COMPUTE_BIT
            ci.stage.module = mod[0]
            ci.stage.pName = entry
            ci.stage.pSpecializationInfo = spec_info if self.spec else NULL
            req = _subgroup_size_info(device, shader, ci.stage)  # held until the call returns
            out = ffi.new("VkPipeline*")
            try:
                check(
                    f"vkCreateComputePipelines({shader}, spec={self.spec})",
                    lib.vkCreateComputePipelines(dev, device.pipeline_cache or NULL, 1, ci, NULL, out),
                )
            finally:
                lib.vkDestroyShaderModule(dev, mod[0], NULL)
                del req
            self.handle = out[0]
            self.stats = executable_stats(device, self.handle) if stats else {}
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        dev = self.device
        if dev is None:
            return
        if self.handle is not None:
            lib.vkDestroyPipeline(dev.handle, self.handle, NULL)
        if self.layout is not None:
            lib.vkDestroyPipelineLayout(dev.handle, self.layout, NULL)
        if self.set_layout is not None:
            lib.vkDestroyDescriptorSetLayout(dev.handle, self.set_layout, NULL)
        self.handle = self.layout = self.set_layout = None
        if dev._pipelines.get(self.key) is self:
            del dev._pipelines[self.key]
        dev._unregister(self)
        self.device = None

    def __repr__(self) -> str:
        return f"<Pipeline {self.shader} spec={self.spec} bindings={self.n_bindings} push={self.push_size}>"


_CAPTURE_STATISTICS = 0x40  # VK_PIPELINE_CREATE_CAPTURE_STATISTICS_BIT_KHR
_FULL_SUBGROUPS = 0x2  # VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT


def _subgroup_size_info(device, shader: str, stage):
    """A shader's REQUIRED_SUBGROUP_SIZE into its stage (full subgroups too where the device has
    them): AMD and Intel choose a pipeline's subgroup size, and the coop kernels index matrices by
    subgroup. Returns the struct chained into stage (the caller holds it), or None."""
    lanes = required_subgroup_size(shader)
    f = device.info.features
    if not lanes or not (f.get("subgroup_size_control") and f.get("subgroup_size_compute")):
        if lanes and not f.get("min_subgroup_size") == f.get("max_subgroup_size") == lanes:
            raise VulkanError(
                f"{shader} needs {lanes}-lane subgroups, which {device.info.name} cannot require"
            )
        return None
    req = new("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo*", {"requiredSubgroupSize": lanes})
    stage.pNext = req
    stage.flags = _FULL_SUBGROUPS if f.get("compute_full_subgroups") else 0
    return req


def _pipeline_cache_path(device) -> pathlib.Path:
    i = device.info
    tag = re.sub(r"[^A-Za-z0-9.]+", "_", f"{i.vendor_id:x}-{i.device_id:x}-{i.driver_version}")
    return cache_dir() / f"pipelines-{tag}.bin"


def open_pipeline_cache(device):
    """A VkPipelineCache seeded from disk; drivers check the header and ignore foreign data."""
    path = _pipeline_cache_path(device)
    blob = path.read_bytes() if path.exists() else b""
    for data in [blob, b""] if blob else [b""]:
        init = ffi.from_buffer(data) if data else NULL  # held until vkCreatePipelineCache returns
        info = new("VkPipelineCacheCreateInfo*", {"initialDataSize": len(data), "pInitialData": init})
        out = ffi.new("VkPipelineCache*")
        if lib.vkCreatePipelineCache(device.handle, info, NULL, out) == vk.VK_SUCCESS:
            return out[0], path
    return None, path


def save_pipeline_cache(device) -> None:
    try:
        n = ffi.new("size_t*")
        if (
            lib.vkGetPipelineCacheData(device.handle, device.pipeline_cache, n, NULL) != vk.VK_SUCCESS
            or not n[0]
        ):
            return
        buf = ffi.new("char[]", n[0])
        if lib.vkGetPipelineCacheData(device.handle, device.pipeline_cache, n, buf) != vk.VK_SUCCESS:
            return
        path = device._pipeline_cache_path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(ffi.buffer(buf, n[0]))
        os.replace(tmp, path)
    except OSError:  # a read-only cache dir must not break closing the device
        pass

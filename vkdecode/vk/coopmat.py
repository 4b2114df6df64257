"""Which tensor-core path a device gets (shaders/coopmat.glsl, the *_coop.comp kernels): a pure
choice from what the probe reports and whether a compiler for GL_KHR_cooperative_matrix exists,
so tests feed it fake devices. The probe stores the answer in DeviceInfo.features (coop,
coop_subgroup, coop_reason); KernelCaps.coop_matrix follows it.
"""

from __future__ import annotations

LANES = 32  # shaders/coopmat.glsl REQUIRED_SUBGROUP_SIZE: the kernels' lanes per subgroup
SHAPE = "16x16x16 f16*f16+f32=f32 subgroup"  # the one shape the kernels use (M x N x K, A*B+C=R)
_TYPES = {0: "f16", 1: "f32", 2: "f64", 3: "s8", 4: "s16", 5: "s32", 6: "s64", 7: "u8", 8: "u16", 9: "u32"}
_TYPES[1000141000] = "bf16"  # VK_COMPONENT_TYPE_BFLOAT16_KHR (VK_KHR_shader_bfloat16)
_SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue_family"}


def shape_name(m: int, n: int, k: int, a: int, b: int, c: int, r: int, scope: int) -> str:
    """One VkCooperativeMatrixPropertiesKHR entry as SHAPE spells it."""
    t = lambda v: _TYPES.get(v, f"type{v}")
    return f"{m}x{n}x{k} {t(a)}*{t(b)}+{t(c)}={t(r)} {_SCOPES.get(scope, f'scope{scope}')}"


def subgroup_choice(f: dict) -> tuple[int, str]:
    """(subgroup size a coop pipeline requires, 0 where the device's is fixed at LANES), or
    (-1, why not). AMD lets a pipeline choose 32 or 64 lanes, Intel 8 to 32: the pipeline asks for
    LANES through subgroup size control (RDNA3's WMMA runs wave32 natively)."""
    lo, hi, size = f.get("min_subgroup_size"), f.get("max_subgroup_size"), f.get("subgroup_size")
    if lo == hi == size == LANES:
        return 0, ""
    sizes = f"{lo}" if lo == hi else f"{lo}-{hi}"
    if lo is None or hi is None or not lo <= LANES <= hi:
        return -1, f"subgroups of {sizes} lanes, the kernels need {LANES}"
    if not (f.get("subgroup_size_control") and f.get("subgroup_size_compute")):
        return -1, f"subgroups of {sizes} lanes and no subgroup size control for compute to require {LANES}"
    return LANES, ""


# The first Khronos validation layer that knows SPV_KHR_cooperative_matrix (the extension's release,
# 1.3.255). An older one (Debian 12 ships 1.3.239) reports every coop shader as invalid SPIR-V, so
# while validating under it the tensor-core kernels stay off rather than fail the run.
KHR_VALIDATION = (1 << 22) | (3 << 12) | 255


def version_str(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def old_layer_reason(validation_layer: int) -> str:
    """Why the KHR path is off while validating under `validation_layer` ("" when it may run)."""
    if not 0 < validation_layer < KHR_VALIDATION:
        return ""
    return (
        f"the validation layer ({version_str(validation_layer)}) predates SPV_KHR_cooperative_matrix "
        f"({version_str(KHR_VALIDATION)}): off while validating"
    )


def choose(f: dict, compiler_error: str = "", validation_layer: int = 0) -> dict:
    """{"coop": "khr" or "", "coop_subgroup": lanes to require (0: fixed), "coop_reason": why ""}
    from a probe's features; compiler_error says why no glslang here compiles the KHR form;
    validation_layer is the Khronos layer's spec version when validating (0: not validating)."""
    missing = [
        name
        for key, name in (
            ("float16", "shaderFloat16"),
            ("storage_16bit", "16-bit storage"),
            ("vulkan_memory_model", "vulkanMemoryModel"),
        )
        if not f.get(key)
    ] + [f"subgroup {op}" for op in ("shuffle", "vote") if op not in f.get("subgroup_ops", ())]
    lanes, why = subgroup_choice(f)
    shapes = f.get("coop_shapes", [])
    if not f.get("coop_matrix_khr"):
        nv = " (VK_NV_cooperative_matrix only)" if f.get("coop_matrix_nv") else ""
        why = f"no VK_KHR_cooperative_matrix for compute{nv}"
    elif SHAPE not in shapes:
        why = f"no {SHAPE} shape (reports {', '.join(shapes[:4]) or 'none'})"
    elif missing:
        why = "no " + ", ".join(missing)
    elif lanes >= 0:
        why = compiler_error
    if not why:
        why = old_layer_reason(validation_layer)
    return {"coop": "" if why else "khr", "coop_subgroup": max(lanes, 0), "coop_reason": why}


def describe(f: dict) -> str:
    """One line for `vkdecode devices`: the path and its subgroups, or none and why."""
    if f.get("coop") == "khr":
        n = f.get("coop_subgroup", 0)
        how = f"{n} lanes required per pipeline" if n else f"{LANES} lanes, fixed"
        return f"KHR cooperative matrix ({SHAPE}, {how})"
    return f"none ({f.get('coop_reason') or 'not probed'})"

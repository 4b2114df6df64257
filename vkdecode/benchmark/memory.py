"""Host and device memory of a loaded model against issue 33's targets, for `vkdecode bench`'s
`memory` record and bench/load_memory.py: the process's RSS from /proc/self/status (Linux), the
device's allocated bytes, the model file's size, and the target that applies to the device type."""

from __future__ import annotations

import gc
import glob
import os

CPU_RATIO = 2.5  # the target on a device whose memory is host memory: peak RSS <= 2.5 x file
DISCRETE_EXTRA = 300 * 10**6  # and the host RSS it allows over the file on a GPU (weights in VRAM)


def status_bytes(key: str) -> int:
    """A /proc/self/status field (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak_rss() -> bool:
    """Set VmHWM to the current RSS (Linux >= 4.0), so a later VmHWM is the peak of what ran in
    between; False where /proc/self/clear_refs cannot be written (the peak then stays the process's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # 5 resets the peak only; 1-4 would clear page flags
        return True
    except OSError:
        return False


def model_file_bytes(source: str) -> int | None:
    """Bytes of the model's file: a GGUF's size, an HF directory's *.safetensors together; None
    where there is no file (a bench shape's random weights)."""
    if os.path.isfile(source):
        return os.path.getsize(source)
    if os.path.isdir(source):
        return sum(os.path.getsize(f) for f in glob.glob(os.path.join(source, "*.safetensors"))) or None
    return None


def target(device_type: str, file_bytes: int | None, peak_rss: int, rss_after_load: int) -> dict:
    """The issue's target for this device type and whether the figures meet it (None without a file).
    On a CPU device (lavapipe) the weights on the device are host memory, so the whole peak counts;
    on a GPU they live in VRAM and the host RSS after the load is what stays, which still holds the
    Python process, numpy, the tokenizer and the Vulkan driver (torch is not imported)."""
    if device_type == "cpu":
        name, value = f"peak_rss <= {CPU_RATIO} x file_bytes", peak_rss
        limit = None if file_bytes is None else int(CPU_RATIO * file_bytes)
    else:
        name, value = f"rss_after_load <= file_bytes + {DISCRETE_EXTRA // 10**6} MB", rss_after_load
        limit = None if file_bytes is None else file_bytes + DISCRETE_EXTRA
    return {
        "target": name,
        "target_limit_bytes": limit,
        "target_met": None if limit is None else value <= limit,
    }


def device_figures(device, executor) -> dict:
    """What the device holds once `executor` is built: every live allocation, and its weights."""
    return {
        "device_allocated_bytes": device.allocated_bytes,
        "weight_bytes": sum(executor.plan.weight_bytes.values()),
    }


def measure_load(device, load) -> tuple[object, dict]:
    """load() (a result with .executor) and the host RSS before and after it, with the peak of the
    load itself where VmHWM can be reset, else the process's peak so far."""
    gc.collect()
    own_peak = reset_peak_rss()
    before = status_bytes("VmRSS")
    model = load()
    gc.collect()
    return model, {
        "rss_before_load": before,
        "rss_after_load": status_bytes("VmRSS"),
        "peak_rss": status_bytes("VmHWM"),
        "peak_rss_since": "load start" if own_peak else "process start",
        **device_figures(device, model.executor),
    }


def after_build(device, executor, source: str) -> dict:
    """The bench's `memory` record, taken right after a mode's executor is built on the bench's load."""
    device_type = device.info.device_type
    peak, after = status_bytes("VmHWM"), status_bytes("VmRSS")
    file_bytes = model_file_bytes(source)
    return {
        "device_type": device_type,
        "file_bytes": file_bytes,
        "peak_rss": peak,
        "rss_after_load": after,
        **device_figures(device, executor),
        **target(device_type, file_bytes, peak, after),
        "notes": [
            (
                "peak_rss is VmHWM, the process's peak since it started: imports, the device, the "
                "bench's load and the first mode's executor build, so it bounds that load"
            ),
            (
                "the bench's load keeps a packed host copy of the weights for its modes, which "
                "vkdecode.load does not (python -m bench.load_memory measures that load alone)"
            ),
        ],
    }


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"  # decimal, as the "file + 300 MB"


def memory_note(m: dict) -> str:
    """One line: the file, the host RSS the target reads, the verdict, the device's allocations."""
    f = m["file_bytes"]
    cpu = m["device_type"] == "cpu"
    if f is None:
        host = f"no model file (random weights), host peak RSS {mb(m['peak_rss'])}"
    elif cpu:
        host = (
            f"file {mb(f)}, host peak RSS {mb(m['peak_rss'])} ({m['peak_rss'] / f:.2f}x the file; "
            f"target <= {CPU_RATIO}x on a CPU device: {'met' if m['target_met'] else 'not met'})"
        )
    else:
        host = (
            f"file {mb(f)}, host RSS after load {mb(m['rss_after_load'])} (file + "
            f"{mb(m['rss_after_load'] - f)}; target <= file + {mb(DISCRETE_EXTRA)} on a GPU: "
            f"{'met' if m['target_met'] else 'not met'}), host peak RSS {mb(m['peak_rss'])}"
        )
    return (
        f"memory (bench's load + first executor): {host}, device {mb(m['device_allocated_bytes'])} "
        f"allocated ({mb(m['weight_bytes'])} weights)"
    )

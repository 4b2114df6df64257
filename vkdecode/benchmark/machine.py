"""Where a benchmark ran (device, driver, date, commit) and the device's copy bandwidth, the yardstick
for the bandwidth each mode reaches."""

from __future__ import annotations

import os
import subprocess
import time


def copy_bandwidth(device, nbytes: int = 256 << 20, reps: int = 5, runs: int = 4) -> float:
    """GB/s of the faster of two device-local -> device-local copies: vkCmdCopyBuffer and a compute
    shader copying uvec4 words (NVIDIA's driver tops out near 850 GB/s with the former on an H200,
    far below what the matvec kernels read). Counts read + write bytes; best of `runs`."""
    return max(copy_bandwidths(device, nbytes, reps, runs).values())


def copy_bandwidths(device, nbytes: int = 256 << 20, reps: int = 5, runs: int = 4) -> dict[str, float]:
    from vkdecode.vk.descriptors import write_descriptor_set

    # one binding each: no bigger than the device lets a shader see (lavapipe: 128 MiB)
    nbytes = min(nbytes, int(device.limits["max_storage_buffer_range"]))
    nbytes -= nbytes % 16
    a, b = device.buffer(nbytes), device.buffer(nbytes)
    ts = device.timestamp_pool(2)
    pipe = device.pipeline("copy_words", (256, nbytes // 16), None, 2)
    pool = device.descriptor_pool(1, 2)
    dset = pool.allocate(pipe)
    write_descriptor_set(device, dset, [(a, 0, nbytes), (b, 0, nbytes)])
    groups = min(65535, max(1, nbytes // 16 // 256 // 4))
    out = {}
    try:
        for method in ("vkCmdCopyBuffer", "compute"):

            def one(cmd, method=method):
                if method == "compute":
                    cmd.bind(pipe, dset)
                    cmd.dispatch(groups)
                else:
                    cmd.copy(a, b, nbytes)
                cmd.barrier()

            cmd = device.command_buffer()
            cmd.begin(one_time=False)
            ts.reset_cmd(cmd)
            one(cmd)
            cmd.timestamp(ts, 0)
            for _ in range(reps):
                one(cmd)
            cmd.timestamp(ts, 1)
            cmd.end()
            best = float("inf")
            for _ in range(runs):
                device.submit([cmd])
                t0, t1 = ts.read_ns()
                best = min(best, t1 - t0)
            cmd.close()
            out[method] = 2 * nbytes * reps / best if best > 0 else 0.0
    finally:
        for o in (pool, ts, a, b):
            o.close()
    return out


def git_commit() -> str | None:
    if os.environ.get("VKDECODE_GIT_COMMIT"):
        return os.environ["VKDECODE_GIT_COMMIT"]  # set by scripts that run where .git is not copied
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        r = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        return r.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device) -> dict:
    i = device.info
    return {
        "device": i.name,
        "vendor": i.vendor,
        "device_type": i.device_type,
        "driver": i.driver_name,
        "driver_version": i.driver_version,
        "driver_info": i.driver_info,
        "vulkan": i.api_version,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "git_commit": git_commit(),
    }

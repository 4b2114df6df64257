"""Host memory of loading a model through the API (vkdecode.load, as `vkdecode run` and `serve`
load): peak RSS (VmHWM) and RSS after the load, each in a fresh child process so that nothing the
parent did counts (ru_maxrss deltas mean nothing after other work), against the file's size.

    python -m bench.load_memory MODEL [--ctx 256 4096] [--repeat 1] [--out FILE.json]

Per context, one JSON record: overhead_rss (VmHWM after `import vkdecode` + the device, before the
load), peak_rss and rss_after (VmHWM / VmRSS once the load returned), load_s, the device's
allocated bytes and the weights' bytes on it. On a CPU device (lavapipe) device memory is host
memory, so the issue's target there is peak_rss <= 2.5 x the file; on a discrete GPU it is host
RSS <= file + 300 MB, estimated on lavapipe as rss_after - weight_bytes (the uploaded weights are
the part of lavapipe's RSS that a discrete GPU holds in VRAM; KV pages never written are not
resident on lavapipe, so the estimate is an upper bound) and read as rss_after on a GPU. The
constants, the /proc reader and the targets are vkdecode/benchmark/memory.py's, as in `vkdecode bench`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from vkdecode.benchmark.memory import device_figures, model_file_bytes, status_bytes, target

MB = 1 << 20


def child(path: str, ctx: int) -> dict:
    """One load in this (fresh) process; the modules the load imports are imported first, so the
    overhead counts them and the peak counts only the load."""
    import gc
    import time

    import vkdecode
    import vkdecode.executors.decoder  # imported by the load: counted as overhead
    import vkdecode.models.loader
    from vkdecode.vk.device import Device

    dev = Device()
    overhead = status_bytes("VmHWM")
    t0 = time.perf_counter()
    model = vkdecode.load(path, device=dev, ctx=ctx)
    load_s = time.perf_counter() - t0
    gc.collect()
    peak, after = status_bytes("VmHWM"), status_bytes("VmRSS")
    out = {
        "ctx": ctx,
        "device": dev.info.name,
        "device_type": dev.info.device_type,
        "overhead_rss": overhead,
        "peak_rss": peak,
        "rss_after": after,
        "load_s": round(load_s, 3),
        **device_figures(dev, model.executor),
    }
    model.close()
    dev.close()
    return out


def measure(path: str, ctx: int) -> dict:
    cmd = [sys.executable, "-m", "bench.load_memory", path, "--child", str(ctx)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=root)
    rec = json.loads(done.stdout.strip().splitlines()[-1])
    file_bytes = model_file_bytes(path)
    # the weights on lavapipe's device are host memory that a discrete GPU holds in VRAM
    on_host = rec["weight_bytes"] if rec["device_type"] == "cpu" else 0
    host_est = rec["rss_after"] - on_host
    rec.update(
        file_bytes=file_bytes,
        peak_over_file=round(rec["peak_rss"] / file_bytes, 3),
        after_over_file=round(rec["rss_after"] / file_bytes, 3),
        load_peak_over_file=round((rec["peak_rss"] - rec["overhead_rss"]) / file_bytes, 3),
        discrete_host_rss_est=host_est,
        cpu_target_met=target("cpu", file_bytes, rec["peak_rss"], host_est)["target_met"],
        discrete_target_met=target("discrete", file_bytes, rec["peak_rss"], host_est)["target_met"],
    )
    return rec


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a GGUF file or an HF safetensors directory")
    ap.add_argument("--ctx", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--repeat", type=int, default=1, help="loads per context (each its own process)")
    ap.add_argument("--out", help="write the JSON here (default: stdout only)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)  # one load in this process
    a = ap.parse_args(argv)
    if a.child is not None:
        print(json.dumps(child(a.model, a.child)))
        return
    runs = [measure(a.model, ctx) for ctx in a.ctx for _ in range(a.repeat)]
    for r in runs:
        print(
            f"ctx {r['ctx']}: peak {r['peak_rss'] / MB:.0f} MiB ({r['peak_over_file']}x the file), "
            f"after {r['rss_after'] / MB:.0f} MiB, overhead {r['overhead_rss'] / MB:.0f} MiB, "
            f"load {r['load_s']} s",
            file=sys.stderr,
        )
    text = json.dumps({"model": a.model, "runs": runs}, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

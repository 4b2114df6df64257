"""`vkdecode bench`: every mode on the same model, prompt and token count in one process; a
llama-bench-like table, JSON and a PNG chart. The formatting here is reused by bench/run_all.py."""

from __future__ import annotations

import json
import os
import sys

from vkdecode.errors import VkDecodeError


def add_bench_parser(sub) -> None:
    from vkdecode.cli.options import add_model_source_options
    from vkdecode.executors import MODES

    p = sub.add_parser("bench", help="decode speed of each mode on one model, in one process")
    add_model_source_options(p)
    p.add_argument(
        "--modes", nargs="+", default=list(MODES), choices=MODES, help="modes to run (default: all)"
    )
    p.add_argument(
        "-n", "--tokens", type=int, default=128, help="timed decode steps per repetition (default 128)"
    )
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per mode (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed repetitions first (default 1)")
    p.add_argument(
        "--prompt-tokens", type=int, default=16, help="prompt steps before the timed ones (default 16)"
    )
    p.add_argument(
        "--copy-mib",
        type=int,
        default=256,
        help="size of the Vulkan buffer copy that measures the device's bandwidth (0: skip)",
    )
    p.add_argument(
        "--profile", action="store_true", help="also GPU µs per region, summed by rule (replay modes)"
    )
    p.add_argument(
        "--json", metavar="OUT", default=None, help="write all figures as JSON to OUT ('-' = stdout)"
    )
    p.add_argument(
        "--plot", metavar="OUT.png", default=None, help="write a chart of per-token latency by mode"
    )
    p.add_argument(
        "--no-user-path",
        dest="user_path",
        action="store_false",
        help="skip the user's path (vkdecode.load + stream_generate at the default ctx; model files only)",
    )
    p.add_argument("--quiet", action="store_true", help="no per-repetition progress on stderr")
    p.set_defaults(func=cmd_bench)


def bench_ctx(args) -> int | None:
    """--ctx, else the user's default (DecodeOptions: min(4096, the model's maximum); None lets the
    loader clamp a model file): attention's grid and registers depend on the context the step is
    built for, so a bench at a smaller one times a step no user runs (H200, Qwen3-0.6B F16: 1030
    tok/s at ctx 192, 948 at 4096)."""
    from vkdecode.options import DecodeOptions

    if args.ctx:
        return args.ctx
    return DecodeOptions().ctx if getattr(args, "shape", None) else None


def cmd_bench(args) -> int:
    from vkdecode import benchmark as bench
    from vkdecode.cli.options import bench_model_from_args, open_device

    if args.tokens < 1 or args.reps < 1 or args.warmup < 0 or args.prompt_tokens < 1:
        raise VkDecodeError("bench needs -n >= 1, --reps >= 1, --warmup >= 0 and --prompt-tokens >= 1")
    if args.plot:
        require_matplotlib()
    model = bench_model_from_args(args, bench_ctx(args), args.prompt_tokens)
    ctx = model.program.meta.get("ctx")
    if args.prompt_tokens + args.tokens > ctx:
        raise VkDecodeError(
            f"--prompt-tokens + -n = {args.prompt_tokens + args.tokens} does not fit --ctx {ctx}"
        )
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    with open_device(args.device) as dev:
        res = bench.run_bench(
            dev,
            model,
            args.modes,
            args.tokens,
            args.reps,
            args.warmup,
            args.profile,
            args.copy_mib << 20,
            log,
        )
        if args.user_path and not args.shape:
            res["user_path"] = user_path_figures(dev, args, model, res, log)
    to_stdout = args.json == "-"
    out = sys.stderr if to_stdout else sys.stdout
    print(format_table([res]), file=out)
    print(format_notes(res), file=out)
    if args.json:
        write_json(res, args.json)
    if args.plot:
        plot_results([res], args.plot)
    if not res["agreement"]["ok"]:
        print("error: greedy outputs differ between modes (see MISMATCH above)", file=sys.stderr)
        return 1
    return 0


def user_path_figures(dev, args, model, res: dict, log) -> dict:
    """The API's path on the same file and prompt, its greedy tokens checked against the bench's,
    and its rate as a fraction of the bench's fused rate (issue: within 2%)."""
    from vkdecode import benchmark as bench

    up = bench.user_path(dev, model.source, model.prompt_ids, args.tokens, args.reps, log=log)
    res["memory"]["user_path"] = up.pop("memory")  # all memory figures in one record
    fused = res["modes"].get("fused")
    up["vs_fused"] = up["tok_s"]["median"] / fused["tok_s"]["median"] if fused else None
    base = next(iter(res["modes"].values()))["tokens"]
    if up["tokens"] != base[: len(up["tokens"])]:
        res["agreement"]["ok"] = False
        res["agreement"]["mismatches"].append(
            {"mode": "user path", "first_index": -1, "unstable": "tokens differ"}
        )
    return up


def write_json(res, path: str) -> None:
    text = json.dumps(res, indent=1)
    if path == "-":
        print(text)
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")


def _size(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.2f} MiB"


def _params(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M"


def format_table(results: list[dict]) -> str:
    """Markdown table in the spirit of llama-bench: one row per (model, mode)."""
    cols = [
        "model",
        "size",
        "params",
        "quant",
        "device",
        "mode",
        "test",
        "t/s",
        "host µs/t",
        "GPU µs/t",
        "dispatches/t",
        "desc writes/t",
    ]
    rows = []
    for res in results:
        m, env = res["model"], res["environment"]
        for mode, r in res["modes"].items():
            ts = r["tok_s"]
            rows.append(
                [
                    m["name"],
                    _size(m["size_bytes"]),
                    _params(m["params"]),
                    m["quant"],
                    env["device"],
                    mode,
                    f"tg{res['settings']['tokens']}",
                    f"{ts['median']:.2f} ± {ts['sd']:.2f}",
                    f"{r['host_us']['median']:.1f}",
                    f"{r['gpu_us']['median']:.1f}",
                    str(r["executed_per_token"]["dispatches"]),
                    str(r["host_calls_per_token"]["descriptor_writes"]),
                ]
            )
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c) for i, c in enumerate(cols)]
    line = lambda cells: (
        "| "
        + " | ".join(c.rjust(w) if i >= 6 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        + " |"
    )
    sep = "| " + " | ".join(("-" * (w - 1) + ":") if i >= 6 else "-" * w for i, w in enumerate(widths)) + " |"
    return "\n".join([line(cols), sep] + [line(r) for r in rows])


def format_notes(res: dict) -> str:
    from vkdecode.benchmark.memory import mb, memory_note

    lines, agree = [], res["agreement"]
    if agree["ok"]:
        lines.append(
            f"greedy tokens agree across modes ({', '.join(res['modes'])}; baseline {agree['baseline']})"
        )
    for mm in agree["mismatches"]:
        lines.append(
            f"!!! MISMATCH: {mm['mode']} differs from {agree['baseline']} at token {mm['first_index']}: "
            f"expected {mm.get('expected')} got {mm.get('got')} {mm.get('unstable', '')}".rstrip()
        )
    if res.get("host_us_ratio_unfused_fused"):
        lines.append(f"host enqueue per token, unfused / fused: {res['host_us_ratio_unfused_fused']:.1f}x")
    wb, copy = res["weight_bytes_per_token"], res["copy_GBps"]
    for mode, r in res["modes"].items():
        bw = r["bandwidth"]
        frac = (
            f" = {100 * bw['fraction_of_copy']:.3g}% of the copy bandwidth" if bw["fraction_of_copy"] else ""
        )
        lines.append(
            f"{mode}: weights {_size(wb)}/token x {r['tok_s']['median']:.1f} tok/s = "
            f"{bw['GBps']:.2f} GB/s{frac}"
        )
    if res.get("memory"):
        lines.append(memory_note(res["memory"]))
    up = res.get("user_path")
    if up:
        vs = f" = {up['vs_fused']:.3f} x fused" if up.get("vs_fused") else ""
        load = res.get("memory", {}).get("user_path")
        rss = (
            f"; its load: host RSS {mb(load['rss_before_load'])} -> {mb(load['rss_after_load'])}, "
            f"peak {mb(load['peak_rss'])} since {load['peak_rss_since']}"
            if load
            else ""
        )
        lines.append(
            f"user path (vkdecode.load + stream_generate, ctx {up['ctx']}, {up['mode']}): "
            f"{up['tok_s']['median']:.1f} tok/s{vs}{rss}"
        )
    if copy:
        lines.append(
            f"device copy bandwidth (best of vkCmdCopyBuffer and a compute copy, read + write): {copy:.1f} GB/s"
        )
    for mode, r in res["modes"].items():
        if "region_us" in r:
            total = sum(e["us"] for e in r["region_us"].values())
            lines.append(f"{mode}: GPU µs per token by rule (total {total:.1f}):")
            lines += [
                f"  {rule:34s} {e['us']:10.1f} µs  {e['regions']:4d} regions{_read_rate(e)}"
                for rule, e in r["region_us"].items()
            ]
    return "\n".join(lines)


def _read_rate(e: dict) -> str:
    """A rule's weight read rate, and its share of the copy rate where that was measured."""
    if not e.get("GBps"):
        return ""
    frac = f" ({100 * e['fraction_of_copy']:.0f}% of copy)" if e.get("fraction_of_copy") else ""
    return f"  {e['GBps']:8.1f} GB/s{frac}"


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise VkDecodeError(
            "--plot needs matplotlib: pip install matplotlib (or pip install 'vkdecode[plot]')"
        ) from None


def plot_results(results: list[dict], path: str) -> None:
    """One panel per benchmarked model: per-token wall, GPU and host enqueue µs by mode (± sd)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # no display on CI machines and GPU servers
    import matplotlib.pyplot as plt

    cols = min(3, len(results))
    rows = -(-len(results) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(6.5, 4.4 * cols + 1), 3.8 * rows + 0.8), squeeze=False)
    for ax in axes.flat[len(results) :]:
        ax.set_visible(False)
    series = [("wall_us", "per token (wall)"), ("gpu_us", "GPU"), ("host_us", "host enqueue")]
    for ax, res in zip(axes.flat, results):
        modes = list(res["modes"])
        for k, (key, label) in enumerate(series):
            med = [res["modes"][m][key]["median"] for m in modes]
            sd = [res["modes"][m][key]["sd"] for m in modes]
            ax.bar(
                [i + (k - 1) * 0.27 for i in range(len(modes))], med, 0.27, yerr=sd, capsize=3, label=label
            )
        ax.set_xticks(range(len(modes)), modes)
        vals = [res["modes"][m][key]["median"] for m in modes for key, _ in series]
        if min(vals) > 0 and max(vals) / min(vals) > 30:
            ax.set_yscale("log")
        m = res["model"]
        rand = ", random weights" if m.get("source") == "random weights" else ""
        ax.set_title(f"{m['name']} {m['quant']}{rand}", fontsize=9)
        ax.set_ylabel("µs per token")
    axes[0][0].legend(fontsize=8)
    env = results[0]["environment"]
    fig.suptitle(f"vkdecode: decode latency by mode\n{env['device']}, {env['date'][:10]}", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)

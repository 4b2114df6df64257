"""`vkdecode stats`: the fused step's regions, and per-token work of every mode side by side.

Executed figures (dispatches, pipeline binds, barriers) come from the recording, because replay
executes them without any host call; host figures are the Vulkan calls counted during a real step.
"""

from __future__ import annotations

import json
import sys

from vkdecode.cli.options import add_model_source_options, bench_model_from_args, open_device

EXECUTED_ROWS = [("dispatches", "dispatches"), ("pipeline_binds", "pipeline binds"), ("barriers", "barriers")]
HOST_ROWS = [
    ("descriptor_writes", "descriptor writes"),
    ("descriptor_set_allocations", "descriptor-set allocations"),
    ("command_buffer_recordings", "command-buffer recordings"),
    ("recorded_commands", "recorded commands"),
    ("submits", "submits"),
]
STEPS = 3  # the first step may differ (first use); the last one is reported
PREFILL_WIDTH = 32  # the prompt-chunk width whose regions and per-chunk work are shown
BATCH_WIDTHS = "1,4"  # the batched-decode widths whose per-step work is shown (cli/stats_batch.py)


def add_stats_parser(sub) -> None:
    p = sub.add_parser("stats", help="region and descriptor statistics of a model, per mode")
    add_model_source_options(p)
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.add_argument(
        "--prefill-width",
        type=int,
        default=PREFILL_WIDTH,
        metavar="T",
        help=f"prompt-chunk width to report (default {PREFILL_WIDTH}; 0 = no prefill section)",
    )
    p.add_argument(
        "--batch-widths",
        default=BATCH_WIDTHS,
        metavar="B,B",
        help=f"batched-decode widths to report (default {BATCH_WIDTHS}; empty = no batch section)",
    )
    p.set_defaults(func=cmd_stats)


def rule_matches(rows: list[dict]) -> dict[str, int]:
    """How many regions each fusion rule matched, in first-seen order (unfused ops not counted)."""
    out: dict[str, int] = {}
    for r in rows:
        if r["rule"]:
            out[r["rule"]] = out.get(r["rule"], 0) + 1
    return out


def _matches_line(matches: dict[str, int]) -> str:
    return "  rule matches: " + (", ".join(f"{rule} ×{n}" for rule, n in matches.items()) or "none")


def group_regions(rows: list[dict]) -> list[dict]:
    """Identical regions (per layer, typically) folded into one row with a count, in first-seen order."""
    keys = ("name", "rule", "ops", "dispatches", "barriers", "descriptor_sets", "weight_bytes")
    groups: dict[tuple, dict] = {}
    for r in rows:
        k = tuple(r[key] for key in keys)
        if k in groups:
            groups[k]["count"] += 1
        else:
            groups[k] = dict(r, count=1)
    return list(groups.values())


def prefill_stats(ex, width: int) -> dict:
    """Chunks of `width` through prompt chunks of ex (the last is the steady state): its regions,
    what one chunk executes, and the host calls one chunk costs."""
    from vkdecode.benchmark import executed_per_token, host_calls_per_token
    from vkdecode.executors.prefill import Prefill

    prefill = Prefill(ex, (width,))
    try:
        n = 2 * width + 1 if 2 * width < ex.ctx else width + 1  # two chunks where they fit
        ids = [int(t) % ex.program.meta["vocab_size"] for t in range(3, 3 + n)]
        prefill.run(ids[:-1], 0)
        prefill.run(ids[:-1], 0)  # again: the first run of a pipeline may include the driver's JIT
        return _chunk_stats(prefill, width, executed_per_token, host_calls_per_token)
    finally:
        prefill.close()


def _chunk_stats(prefill, width: int, executed_per_token, host_calls_per_token) -> dict:
    from vkdecode.executors.alias import activation_memory

    ch = prefill.runners[width]
    last = prefill.chunks[-1].stats
    return {
        "width": width,
        "regions": ch.region_stats(),
        "executed_per_chunk": executed_per_token(ch),
        "host_calls_per_chunk": host_calls_per_token(last.counters.as_dict()),
        "host_us": last.host_us,
        "gpu_us": last.gpu_us,
        "activations": activation_memory(ch.plan),
    }


def collect_stats(device, model, modes, prefill_width: int = 0, log=None, batch_widths=()) -> dict:
    """log(msg): progress, one line per mode (each builds, records and runs its steps: ~15 s on
    lavapipe for SmolLM2)."""
    from vkdecode.benchmark import decode_run, executed_per_token, host_calls_per_token
    from vkdecode.executors import make_executor

    out = {"model": model.describe(), "device": device.info.name, "regions": [], "modes": {}}
    for i, mode in enumerate(modes):
        if log is not None:
            chunk = f" and a {prefill_width}-token prompt chunk" if prefill_width else ""
            log(f"[{i + 1}/{len(modes)}] {mode}: building, then {STEPS} decode steps{chunk}")
        ex = make_executor(mode, device, model.program, model.weights)
        try:
            if mode == modes[0]:
                out["regions"] = ex.region_stats()
            r = decode_run(ex, model.prompt_ids[:1], STEPS - 1)
            out["modes"][ex.mode] = {
                "executed_per_token": executed_per_token(ex),
                "host_calls_per_token": host_calls_per_token(r["counters"]),
                "host_us": ex.token_stats[-1].host_us,
            }
            if 0 < prefill_width < ex.ctx:
                pf = prefill_stats(ex, prefill_width)
                if mode == modes[0]:
                    out["prefill_regions"] = pf.pop("regions")
                    out["prefill_width"] = prefill_width
                pf.pop("regions", None)
                out["modes"][ex.mode]["prefill"] = pf
            if batch_widths:
                from vkdecode.cli.stats_batch import batch_stats

                out["modes"][ex.mode]["batch"] = batch_stats(ex, batch_widths)
        finally:
            ex.close()
    out["region_groups"] = group_regions(out["regions"])
    out["rule_matches"] = rule_matches(out["regions"])
    if out.get("prefill_regions"):
        out["prefill_rule_matches"] = rule_matches(out["prefill_regions"])
    return out


def _mb(n: int) -> str:
    if n == 0:
        return "-"
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 2**10:.1f} KiB"


def format_stats(s: dict) -> str:
    m, lines = s["model"], []
    regs, groups = s["regions"], s["region_groups"]
    lines.append(f"{m['name']} ({m['arch']}, {m['n_layers']} layers, {m['quant']}) on {s['device']}")
    lines.append(
        f"\nRegions of one fused decode step ({len(regs)} regions, {sum(r['ops'] for r in regs)} ops; "
        f"figures per region):"
    )
    lines.append(
        f"  {'region':34s} {'rule':28s} {'ops':>4s} {'disp':>5s} {'barr':>5s} {'sets':>5s} {'weights':>10s}"
    )
    for g in groups:
        name = g["name"] + (f" ×{g['count']}" if g["count"] > 1 else "")
        lines.append(
            f"  {name:34s} {g['rule'] or '-':28s} {g['ops']:4d} {g['dispatches']:5d} {g['barriers']:5d} "
            f"{g['descriptor_sets']:5d} {_mb(g['weight_bytes']):>10s}"
        )
    tot = {k: sum(r[k] for r in regs) for k in ("ops", "dispatches", "barriers", "descriptor_sets")}
    lines.append(
        f"  {'total':34s} {'':28s} {tot['ops']:4d} {tot['dispatches']:5d} {tot['barriers']:5d} "
        f"{tot['descriptor_sets']:5d}"
    )
    lines.append(_matches_line(s.get("rule_matches", {})))
    lines.append(
        f"  weights read per token: {_mb(m['weight_bytes_per_token'])} (of the embedding table, one row)"
    )
    by = m.get("weight_bytes_by_dtype", {})
    lines.append(
        "  weights on the device: "
        + ", ".join(f"{dt} {_mb(n)}" for dt, n in by.items())
        + f"; KV cache {m.get('kv_dtype', '?')}"
    )
    notes = m.get("notes", [])
    if notes:  # f32 at load (no native kernel, rows that do not fit their blocks), MXFP4 as q8_0
        lines.append(f"  converted at load: {len(notes)} tensor(s), e.g. {notes[0]}")
    modes = list(s["modes"])
    head = "".join(f"{mo:>15s}" for mo in modes)
    lines.append(f"\nPer token, steady state {'':12s}{head}")
    lines.append("  executed on the GPU")
    for key, label in EXECUTED_ROWS:
        lines.append(
            f"    {label:34s}" + "".join(f"{s['modes'][mo]['executed_per_token'][key]:15d}" for mo in modes)
        )
    lines.append("  host Vulkan calls")
    for key, label in HOST_ROWS:
        lines.append(
            f"    {label:34s}" + "".join(f"{s['modes'][mo]['host_calls_per_token'][key]:15d}" for mo in modes)
        )
    lines.append(
        f"    {'host enqueue µs (one step)':34s}"
        + "".join(f"{s['modes'][mo]['host_us']:15.0f}" for mo in modes)
    )
    if s.get("prefill_regions"):
        lines += format_prefill(s)
    from vkdecode.cli.stats_batch import format_batch

    lines += format_batch(s, EXECUTED_ROWS, HOST_ROWS)
    lines.append(
        "\nReplay writes no descriptors and records nothing per token: one submit replays the step "
        "recorded once.\nFusion cuts the dispatches and barriers that step executes."
    )
    return "\n".join(lines)


def format_prefill(s: dict) -> list[str]:
    regs, w = s["prefill_regions"], s["prefill_width"]
    lines = [
        (
            f"\nRegions of one prompt chunk of {w} tokens ({len(regs)} regions, {sum(r['ops'] for r in regs)} ops; "
            f"recorded once per width in replay modes):"
        )
    ]
    for g in group_regions(regs):
        name = g["name"] + (f" ×{g['count']}" if g["count"] > 1 else "")
        lines.append(
            f"  {name:34s} {g['rule'] or '-':28s} {g['ops']:4d} {g['dispatches']:5d} {g['barriers']:5d} "
            f"{g['descriptor_sets']:5d} {_mb(g['weight_bytes']):>10s}"
        )
    lines.append(_matches_line(s.get("prefill_rule_matches", {})))
    modes = [mo for mo in s["modes"] if "prefill" in s["modes"][mo]]
    lines.append(f"\nPer prompt chunk of {w} tokens {'':6s}" + "".join(f"{mo:>15s}" for mo in modes))
    lines.append("  executed on the GPU")
    for key, label in EXECUTED_ROWS:
        lines.append(
            f"    {label:34s}"
            + "".join(f"{s['modes'][mo]['prefill']['executed_per_chunk'][key]:15d}" for mo in modes)
        )
    lines.append("  host Vulkan calls")
    for key, label in HOST_ROWS:
        lines.append(
            f"    {label:34s}"
            + "".join(f"{s['modes'][mo]['prefill']['host_calls_per_chunk'][key]:15d}" for mo in modes)
        )
    lines.append(
        f"    {'GPU µs (one chunk)':34s}"
        + "".join(f"{s['modes'][mo]['prefill']['gpu_us']:15.0f}" for mo in modes)
    )
    acts = [s["modes"][mo]["prefill"]["activations"] for mo in modes]
    cells = [f"{a['bytes'] / 2**20:.1f} {a['values']}/{a['slots']}" for a in acts]
    lines.append(f"    {'activations (MiB, values/slots)':34s}" + "".join(f"{c:>15s}" for c in cells))
    return lines


def cmd_stats(args) -> int:
    from vkdecode.executors import MODES

    model = bench_model_from_args(args, args.ctx, STEPS)
    with open_device(args.device) as dev:
        s = collect_stats(
            dev,
            model,
            list(MODES),
            args.prefill_width,
            log=lambda msg: print(msg, file=sys.stderr, flush=True),
            batch_widths=[int(w) for w in args.batch_widths.split(",") if w.strip()],
        )
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        print(format_stats(s))
    sys.stdout.flush()
    return 0

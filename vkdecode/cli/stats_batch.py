"""`vkdecode stats`' batched-decode section: per recorded batch width (executors/batch.py), what one
step of that many sequences executes on the GPU and the host's Vulkan calls for it."""

from __future__ import annotations

STEPS = 3  # steps per width; the last one is reported (the first rewrites the batch's rows)


def batch_stats(ex, widths) -> dict:
    """ex: a decode step executor; every width is run full (that many one-token prompts)."""
    from vkdecode.benchmark import executed_per_token, host_calls_per_token
    from vkdecode.executors.batch import BatchDecode
    from vkdecode.executors.decoder import Decoder

    out = {}
    with BatchDecode(Decoder(ex), widths) as b:
        for w in b.widths:
            for i in range(w):
                b.join([3 + i], None)
            for _ in range(STEPS):
                b.step()
            runner = b.runners[w]
            last = runner.token_stats[-1]
            out[w] = {
                "executed_per_step": executed_per_token(runner),
                "host_calls_per_step": host_calls_per_token(last.counters.as_dict()),
                "gpu_us": last.gpu_us,
            }
            for slot in list(b.rows):
                b.leave(slot)
    return out


def format_batch(s: dict, executed_rows, host_rows) -> list[str]:
    """The section's lines: a column per (mode, width), as the per-token table above it."""
    cols = [(mo, w) for mo in s["modes"] for w in s["modes"][mo].get("batch", {})]
    if not cols:
        return []

    def row(label, get, fmt="18d"):
        return f"    {label:34s}" + "".join(format(get(s["modes"][mo]["batch"][w]), fmt) for mo, w in cols)

    lines = [
        "\nPer batched step of B sequences (each width recorded once in replay modes)",
        f"  {'':36s}" + "".join(f"{f'{mo} B={w}':>18s}" for mo, w in cols),
        "  executed on the GPU",
    ]
    lines += [row(label, lambda b, k=key: b["executed_per_step"][k]) for key, label in executed_rows]
    lines.append("  host Vulkan calls")
    lines += [row(label, lambda b, k=key: b["host_calls_per_step"][k]) for key, label in host_rows]
    lines.append(row("GPU µs (one step)", lambda b: b["gpu_us"], "18.0f"))
    return lines

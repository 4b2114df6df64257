"""Same-run A/B of two checkouts (a base commit and HEAD): the same commands, alternating sides
each round, in one process tree on one device. Run it before a decode change lands.

    python -m bench.ab_commits --base 648c37f --out ab.json -- \\
        "vkdecode bench --shape qwen3-0.6b --quant f16 --modes fused" ...

Each command runs as `python -m <command>` with the side's checkout first on PYTHONPATH and
`--json <tmp>` appended; the figure compared is the fused mode's median tok/s (or, with
--prefill, `python -m bench.prefill ... --out <tmp>`'s TTFT per length). --base takes a commit
(checked out with `git worktree` under bench/out/) or --base-dir an existing checkout (the GPU
machine has no git: prepare the checkout here and carry it).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def checkout(base: str) -> Path:
    """A worktree of `base` under bench/out/ (ignored by git), made once."""
    path = ROOT / "bench" / "out" / f"ab-{base}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), base], cwd=ROOT, check=True)
    return path


def run_side(side: Path, command: str, log) -> dict:
    """One run of `command` on `side`: its JSON."""
    env = dict(os.environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join([str(side), *rest])
    argv = shlex.split(command)
    module = "vkdecode" if argv[0] == "vkdecode" else argv[0]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        flag = "--json" if module == "vkdecode" else "--out"
        cmd = [sys.executable, "-m", module, *argv[1:], flag, str(out)]
        log(f"[{side.name}] {' '.join(cmd[2:])}")
        subprocess.run(cmd, cwd=side, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def figures(res: dict) -> dict[str, float]:
    """The compared figures of one run: fused tok/s (vkdecode bench) or TTFT ms per length (bench.prefill)."""
    if "modes" in res:  # vkdecode bench
        return {f"{mode} tok_s": m["tok_s"]["median"] for mode, m in res["modes"].items()}
    out = {}
    for mode, r in res.get("results", {}).items():
        for n, v in r.items():
            if isinstance(v, dict) and "ttft_ms" in v:
                out[f"{mode} ttft_ms {n}"] = v["ttft_ms"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--base", help="base commit (a git worktree is made under bench/out/)")
    g.add_argument("--base-dir", help="an existing checkout of the base")
    ap.add_argument("--head-dir", default=str(ROOT), help="the checkout under test (default: this one)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="rounds; each runs both sides, alternating who starts"
    )
    ap.add_argument("--out", default=None, help="JSON path")
    ap.add_argument("commands", nargs="+", help='commands, e.g. "vkdecode bench --shape tiny --modes fused"')
    a = ap.parse_args(argv)
    sides = {
        "base": Path(a.base_dir).resolve() if a.base_dir else checkout(a.base),
        "head": Path(a.head_dir).resolve(),
    }
    log = lambda msg: print(msg, file=sys.stderr, flush=True)
    runs: dict[str, dict[str, list[dict]]] = {c: {"base": [], "head": []} for c in a.commands}
    for r in range(a.rounds):
        for c in a.commands:
            order = ("base", "head") if r % 2 == 0 else ("head", "base")
            for name in order:
                runs[c][name].append(figures(run_side(sides[name], c, log)))
    result = {"sides": {k: str(v) for k, v in sides.items()}, "rounds": a.rounds, "commands": {}}
    for c, by in runs.items():
        keys = sorted(set(by["base"][0]) & set(by["head"][0]))
        med = {s: {k: statistics.median(run[k] for run in by[s]) for k in keys} for s in ("base", "head")}
        result["commands"][c] = {
            "runs": by,
            "median": med,
            "head_over_base": {k: med["head"][k] / med["base"][k] for k in keys if med["base"][k]},
        }
        for k in keys:
            log(
                f"{c}: {k}: base {med['base'][k]:.1f}, head {med['head'][k]:.1f} "
                f"(head/base {result['commands'][c]['head_over_base'].get(k, float('nan')):.3f})"
            )
    if a.out:
        Path(a.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

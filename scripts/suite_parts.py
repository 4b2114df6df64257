"""The whole test suite in parts, for machines that give a command a time limit (the lent GPU: 10
minutes a call). Each part is a fixed set of test files, balanced by their durations on lavapipe
(DURATIONS below; new files count as the median), so every machine splits the same way.

    python scripts/suite_parts.py --parts 4 --part 1 --out part1.json   # run part 1 of 4
    python scripts/suite_parts.py --summary part*.json                  # one summary of all parts

A part runs pytest in a child process (VKDECODE_VALIDATE passed through) and writes its counts
and every failure's node id and last line; --summary adds them up and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Seconds per file on lavapipe (2 cores, `pytest --durations=0` summed by file), the slow ones;
# the rest count as the median of these. Only a balance: a stale figure makes a part longer, not wrong.
DURATIONS = {
    "tests/models/test_gemma3_270m.py": 75,
    "tests/models/test_config_property.py": 60,
    "tests/executors/test_executors.py": 60,
    "tests/executors/test_prefill.py": 50,
    "tests/test_reference_models.py": 45,
    "tests/reliability/test_soak.py": 40,
    "tests/serve/test_app.py": 30,
    "tests/lowering/test_ops.py": 30,
    "tests/executors/test_speculative.py": 25,
    "tests/test_api.py": 20,
    "tests/cli/test_cli.py": 20,
}
OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


def test_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py"))


def split(files: list[str], parts: int) -> list[list[str]]:
    """Longest first onto the part with the least time so far (deterministic)."""
    default = statistics.median(DURATIONS.values())
    weighted = sorted(files, key=lambda f: (-DURATIONS.get(f, default), f))
    groups: list[list[str]] = [[] for _ in range(parts)]
    load = [0.0] * parts
    for f in weighted:
        i = load.index(min(load))
        groups[i].append(f)
        load[i] += DURATIONS.get(f, default)
    return groups


def run_part(files: list[str], extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", *extra, *files]
    # a wide terminal: pytest cuts each short-summary line (node id - reason) to the terminal width
    env = dict(os.environ, COLUMNS="400")
    r = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True, env=env)
    tail = r.stdout.strip().splitlines()
    counts: dict[str, int] = {}
    for n, what in OUTCOME.findall(tail[-1] if tail else ""):
        counts["errors" if what.startswith("error") else what] = int(n)
    failures = [line for line in tail if line.startswith(("FAILED ", "ERROR "))]
    return {
        "files": files,
        "rc": r.returncode,
        "counts": counts,
        "failures": failures,
        "last_line": tail[-1:],
    }


def summary(paths: list[str]) -> int:
    total: dict[str, int] = {}
    failures: list[str] = []
    for p in paths:
        part = json.loads(Path(p).read_text())
        for k, n in part["counts"].items():
            total[k] = total.get(k, 0) + n
        failures += part["failures"]
        if part["rc"] not in (0, 1):  # 1 = tests failed; anything else: the run itself broke
            failures.append(f"{p}: pytest exited {part['rc']}: {part['last_line']}")
    print(", ".join(f"{n} {k}" for k, n in sorted(total.items())), f"({len(paths)} parts)")
    for f in failures:
        print(f)
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--part", type=int, help="1-based part to run")
    ap.add_argument("--out", help="JSON of the part's result")
    ap.add_argument("--list", action="store_true", help="print the parts' files")
    ap.add_argument("--summary", nargs="+", metavar="PART_JSON")
    args, extra = ap.parse_known_args(argv)
    if args.summary:
        return summary(args.summary)
    groups = split(test_files(), args.parts)
    if args.list:
        for i, g in enumerate(groups, 1):
            print(i, " ".join(g))
        return 0
    if not args.part or not 1 <= args.part <= args.parts:
        ap.error(f"--part takes 1..{args.parts}")
    res = run_part(groups[args.part - 1], extra)
    res["validate"] = os.environ.get("VKDECODE_VALIDATE") == "1"
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(res["last_line"], *res["failures"], sep="\n")
    return 0 if res["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

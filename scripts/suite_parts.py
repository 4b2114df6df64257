"""The whole test suite in parts, for machines that give a command a time limit (the lent GPU: 10
minutes a call). Each part is a fixed set of test files, balanced by their durations on lavapipe
(DURATIONS below; new files count as the median), so every machine splits the same way.

    python scripts/suite_parts.py --parts 4 --part 1 --out part1.json   # run part 1 of 4
    python scripts/suite_parts.py --parts 1 --part 1 --workers 8 --timeout-s 480 --out all.json  # all
    python scripts/suite_parts.py --summary part*.json                  # one summary of all parts

A part runs pytest in a child process (VKDECODE_VALIDATE passed through) and writes its counts
and every failure's node id and last line; --summary adds them up and exits 1 on any failure.
--log keeps pytest's whole output (tracebacks, captured output). --workers N runs the part's
files on N pytest-xdist processes, a whole file per process (module fixtures stay in one
process), slowest files first. --timeout-s stops pytest as Ctrl-C would (it still prints what
failed so far) and marks the part as timed out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Seconds per file on lavapipe (2 cores, `pytest -n 2 --durations=0` summed by file, 2026-11-27), the
# slow ones; the rest count as the median of these. Only a balance, and the order in which --workers
# hands files out (slowest first): a stale figure makes a part longer, not wrong.
DURATIONS = {
    "tests/models/test_gemma3_270m.py": 142,
    "tests/serve/test_app_smollm2.py": 79,
    "tests/lowering/test_regions.py": 74,
    "tests/scripts/test_doc_tables.py": 59,
    "tests/reliability/test_fuzz_loaders.py": 37,
    "tests/test_reference.py": 34,
    "tests/executors/test_batch.py": 27,
    "tests/reliability/test_serve_batch_stress.py": 22,
    "tests/cli/test_cli.py": 20,
    "tests/reliability/test_soak.py": 20,
    "tests/lowering/test_ops_matmul.py": 19,
    "tests/lowering/test_ops_moe.py": 17,
    "tests/models/test_config_property.py": 14,
    "tests/executors/test_executors_moe.py": 14,
    "tests/reliability/test_cli_errors.py": 13,
    "tests/serve/test_batch_engine.py": 12,
}
OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")
# pytest's closing line ("3 failed, 9 passed in 5.1s"; framed in = after a Ctrl-C)
CLOSING = re.compile(r"^=*\s*(\d+ \w+|no tests ran)\b.* in [\d.]+s\b")


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


def by_directory(files: list[str]) -> list[str]:
    """The files with each directory's kept together, directories in the order of their first file.
    pytest 9.1 loses a nested conftest's fixtures when the arguments interleave that directory's
    files with its parent's (pytest-dev/pytest#14971; the GPU machine's 9.1.1 failed every
    tests/serve test with `fixture 'model' not found`; 9.2 does not)."""
    dirs: dict[str, list[str]] = {}
    for f in files:
        dirs.setdefault(str(Path(f).parent), []).append(f)
    return [f for group in dirs.values() for f in group]


def worker_args(workers: int) -> list[str]:
    """pytest-xdist's options for N processes, one test file at a time each (module- and
    session-scoped fixtures then live in one process, as they do without workers)."""
    if workers <= 1:
        return []
    import importlib.util

    if importlib.util.find_spec("xdist") is None:
        raise SystemExit("--workers needs pytest-xdist: pip install pytest-xdist")
    return ["-n", str(workers), "--dist", "loadfile"]


def run_part(
    files: list[str],
    extra: list[str],
    workers: int = 0,
    timeout_s: float | None = None,
    log: str | None = None,
) -> dict:
    # -rfEs: every failure's, error's and skip's reason in the short summary (the log keeps it)
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider"]
    cmd += [*worker_args(workers), *extra, *by_directory(files)]
    # a wide terminal: pytest cuts each short-summary line (node id - reason) to the terminal width
    env = dict(os.environ, COLUMNS="400")
    # Its own process group, so that a timeout's SIGINT reaches pytest and xdist's workers at once
    # as Ctrl-C in a terminal does; and not started with SIGINT ignored: a shell's background job
    # (`cmd &`, nohup) ignores it, children inherit that, and a Python started so never raises
    # KeyboardInterrupt (pytest then ran past the grace and its output was lost). A handler, unlike
    # an ignore, is reset to the default in the child.
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    timed_out = False
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # SIGINT: pytest and its workers stop as on Ctrl-C and still print the failures so far
        timed_out = True
        os.killpg(proc.pid, signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
    if log:  # the whole output: every failure's traceback and captured output, beyond the short lines
        Path(log).write_text(out)
    tail = out.strip().splitlines()
    summary = [line for line in tail if CLOSING.match(line)]
    counts: dict[str, int] = {}
    for n, what in OUTCOME.findall(summary[-1] if summary else ""):
        counts["errors" if what.startswith("error") else what] = int(n)
    failures = [line for line in tail if line.startswith(("FAILED ", "ERROR "))]
    return {
        "files": files,
        "rc": "timeout" if timed_out else proc.returncode,
        "counts": counts,
        "failures": failures,
        "last_line": summary[-1:] or tail[-1:],
        "workers": workers,
    }


def summary(paths: list[str]) -> int:
    total: dict[str, int] = {}
    failures: list[str] = []
    for p in paths:
        part = json.loads(Path(p).read_text())
        for k, n in part["counts"].items():
            total[k] = total.get(k, 0) + n
        failures += part["failures"]
        if part["rc"] == "timeout":
            failures.append(f"{p}: stopped at --timeout-s, the counts are of the tests run by then")
        elif part["rc"] not in (0, 1):  # 1 = tests failed; anything else: the run itself broke
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
    ap.add_argument("--workers", type=int, default=0, help="pytest-xdist processes (0: none)")
    ap.add_argument("--timeout-s", type=float, help="stop pytest (as Ctrl-C) after this many seconds")
    ap.add_argument("--log", help="file for pytest's whole output (tracebacks, captured output)")
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
    res = run_part(groups[args.part - 1], extra, args.workers, args.timeout_s, args.log)
    res["validate"] = os.environ.get("VKDECODE_VALIDATE") == "1"
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    print(res["last_line"], *res["failures"], sep="\n")
    return 0 if res["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

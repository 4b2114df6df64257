"""scripts/suite_parts.py: the suite's parts cover every test file once, the same way each time,
and a part's result and the summary report what pytest said (a real part run on a small file)."""

from __future__ import annotations

import importlib.util
import json

from tests.helpers.paths import ROOT

spec = importlib.util.spec_from_file_location("suite_parts", ROOT / "scripts" / "suite_parts.py")
suite_parts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite_parts)


def test_parts_cover_every_file_once_and_balance():
    files = suite_parts.test_files()
    assert "tests/scripts/test_suite_parts.py" in files and all(f.startswith("tests/") for f in files)
    assert set(suite_parts.DURATIONS) <= set(files)  # no stale names
    groups = suite_parts.split(files, 4)
    flat = [f for g in groups for f in g]
    assert sorted(flat) == files and len(flat) == len(set(flat))
    assert groups == suite_parts.split(list(reversed(files)), 4)  # order-independent
    # the two slowest files land in different parts
    slow = sorted(suite_parts.DURATIONS, key=suite_parts.DURATIONS.get)[-2:]
    assert len({next(i for i, g in enumerate(groups) if f in g) for f in slow}) == 2


def test_arguments_keep_each_directory_together():
    """pytest 9.1 drops a nested conftest's fixtures when its files interleave with the parent's."""
    files = ["tests/serve/test_a.py", "tests/test_top.py", "tests/serve/test_b.py", "tests/vk/test_c.py"]
    assert suite_parts.by_directory(files) == [
        "tests/serve/test_a.py",
        "tests/serve/test_b.py",
        "tests/test_top.py",
        "tests/vk/test_c.py",
    ]
    every = suite_parts.split(suite_parts.test_files(), 1)[0]
    ordered = suite_parts.by_directory(every)
    assert sorted(ordered) == sorted(every)
    dirs = [f.rsplit("/", 1)[0] for f in ordered]
    assert all(d not in dirs[: i - 1] or dirs[i - 1] == d for i, d in enumerate(dirs) if i)


def test_part_result_and_summary(tmp_path, capsys):
    good = tmp_path / "test_passes.py"
    good.write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n")
    ok = suite_parts.run_part([str(good)], [])
    assert ok["rc"] == 0 and ok["counts"] == {"passed": 2} and ok["failures"] == []
    bad = tmp_path / "test_fails.py"
    bad.write_text("def test_a():\n    assert 1 == 2\n\ndef test_b():\n    pass\n")
    failed = suite_parts.run_part([str(bad)], [])
    assert failed["rc"] == 1 and failed["counts"] == {"failed": 1, "passed": 1}
    assert failed["failures"] and failed["failures"][0].startswith("FAILED ")
    paths = []
    for i, part in enumerate((ok, failed)):
        paths.append(tmp_path / f"part{i}.json")
        paths[-1].write_text(json.dumps(part))
    assert suite_parts.summary([str(p) for p in paths]) == 1
    out = capsys.readouterr().out
    assert "3 passed" in out and "1 failed" in out and "test_a" in out


def test_workers_and_a_timeout_keep_what_failed_so_far(tmp_path, capsys):
    """--workers: pytest-xdist, a whole file per process; --timeout-s: pytest stopped as by Ctrl-C,
    the failures so far kept, the part marked as timed out (and the summary says so)."""
    assert suite_parts.worker_args(0) == [] and suite_parts.worker_args(1) == []
    assert suite_parts.worker_args(3) == ["-n", "3", "--dist", "loadfile"]
    bad = tmp_path / "test_bad.py"
    bad.write_text("def test_c():\n    assert 1 == 2\n")
    slow = tmp_path / "test_slow.py"
    slow.write_text("import time\n\ndef test_a():\n    pass\n\ndef test_b():\n    time.sleep(600)\n")
    log = tmp_path / "log.txt"
    part = suite_parts.run_part([str(bad), str(slow)], [], workers=2, timeout_s=10, log=str(log))
    assert part["rc"] == "timeout" and part["workers"] == 2
    assert part["counts"] == {"failed": 1, "passed": 1}, part
    assert len(part["failures"]) == 1 and "test_bad.py::test_c - assert 1 == 2" in part["failures"][0]
    assert "KeyboardInterrupt" in log.read_text()
    (tmp_path / "part.json").write_text(json.dumps(part))
    assert suite_parts.summary([str(tmp_path / "part.json")]) == 1
    assert "stopped at --timeout-s" in capsys.readouterr().out

"""bench/results_index.py: the README fields it reads, the index it writes, and the real tree's check."""

from __future__ import annotations

import datetime

from bench.results_index import main, parse_readme, render, result_dir, scan

README = "command: `python -m bench.x --n 1`\ncommit: abc1234\nheadline: 12.5 tok/s | fast\n\n# Title\n"


def _folder(root, device, name, text=README):
    d = root / device / name
    d.mkdir(parents=True)
    (d / "README.md").write_text(text)
    return d


def test_real_tree_matches_its_index():
    assert main(["--check"]) == 0


def test_parse_readme_reads_the_top_lines_only():
    assert parse_readme(README) == {
        "command": "`python -m bench.x --n 1`",
        "commit": "abc1234",
        "headline": "12.5 tok/s | fast",
    }
    assert parse_readme("# Title\n" + "\n" * 20 + "headline: too late\n") == {}
    assert parse_readme("headline: a\nheadline: b\n") == {"headline": "a"}


def test_index_per_device_newest_first(tmp_path):
    _folder(tmp_path, "gpu-a", "2026-01-02-older")
    _folder(tmp_path, "gpu-a", "2026-01-05-newer")
    _folder(tmp_path, "cpu", "2026-01-03-topic-x")
    entries, problems = scan(tmp_path)
    assert problems == []
    assert [(e["device"], e["date"], e["topic"]) for e in entries] == [
        ("cpu", "2026-01-03", "topic-x"),
        ("gpu-a", "2026-01-02", "older"),
        ("gpu-a", "2026-01-05", "newer"),
    ]
    text = render(entries)
    assert (
        text.index("## cpu")
        < text.index("## gpu-a")
        < text.index("2026-01-05-newer")
        < text.index("2026-01-02-older")
    )
    assert (
        "| [2026-01-05-newer](gpu-a/2026-01-05-newer/) | 2026-01-05 | newer | abc1234 | 12.5 tok/s \\| fast |"
        in text
    )
    assert main(["--root", str(tmp_path), "--check"]) == 1  # no INDEX.md yet
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--root", str(tmp_path), "--check"]) == 0
    (tmp_path / "cpu" / "2026-01-03-topic-x" / "README.md").write_text(README.replace("12.5", "13.0"))
    assert main(["--root", str(tmp_path), "--check"]) == 1  # stale


def test_check_names_what_breaks_the_scheme(tmp_path, capsys):
    _folder(tmp_path, "gpu", "2026-01-02-ok")
    _folder(tmp_path, "gpu", "session-2026-01-02b")
    _folder(tmp_path, "gpu", "2026-13-40-bad-date")
    _folder(tmp_path, "gpu", "2026-01-03-no-headline", README.replace("headline:", "summary:"))
    (tmp_path / "gpu" / "2026-01-04-no-readme").mkdir()
    (tmp_path / "gpu" / "loose.json").write_text("{}")
    entries, problems = scan(tmp_path)
    assert [e["folder"] for e in entries] == ["2026-01-02-ok"]
    assert sorted(p.split(":")[0] for p in problems) == [
        "gpu/2026-01-03-no-headline",
        "gpu/2026-01-04-no-readme",
        "gpu/2026-13-40-bad-date",
        "gpu/loose.json",
        "gpu/session-2026-01-02b",
    ]
    assert main(["--root", str(tmp_path)]) == 1
    assert "README.md lacks headline" in capsys.readouterr().err
    assert main(["--root", str(tmp_path), "--check"]) == 1


def test_result_dir():
    assert (
        result_dir("nvidia-h100", "run-all", datetime.date(2026, 2, 3), root="/r").as_posix()
        == "/r/nvidia-h100/2026-02-03-run-all"
    )

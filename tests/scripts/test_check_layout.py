"""scripts/check_layout.py: the tree passes, and each check fires on a tiny synthetic package."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import ROOT

SCRIPT = ROOT / "scripts" / "check_layout.py"


def _load():
    spec = importlib.util.spec_from_file_location("check_layout", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


check_layout = _load()


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_tree_passes():
    r = subprocess.run([sys.executable, str(SCRIPT)], check=False, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "check_layout: ok" in r.stdout


def test_detects_a_cycle_through_a_function_local_and_a_submodule_import(tmp_path):
    root = _tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.b import f\n",
            "pkg/b.py": "def f():\n    from pkg import c\n    return c\n",  # `from pkg import c`: pkg.c
            "pkg/c.py": "import pkg.a\n",
            "pkg/d.py": "from . import a\nfrom .sub import e\n",  # relative, no cycle
            "pkg/sub/__init__.py": "",
            "pkg/sub/e.py": "from ..c import x\n",
        },
    )
    graph = check_layout.import_graph(root, ("pkg",))
    assert graph["pkg.b"] == {"pkg.c"}
    assert graph["pkg.d"] == {"pkg.a", "pkg.sub.e"}
    assert graph["pkg.sub.e"] == {"pkg.c"}
    assert check_layout.cycles(graph) == [("pkg.a", "pkg.b", "pkg.c")]
    found = check_layout.problems(root, ("pkg",))
    assert len(found) == 1 and "import cycle among pkg.a, pkg.b, pkg.c" in found[0]
    assert "pkg.b -> pkg.c" in found[0]


def test_the_command_fails_on_a_cycle(tmp_path):
    root = _tree(
        tmp_path,
        {
            "vkdecode/__init__.py": "",
            "vkdecode/a.py": "from vkdecode import b\n",
            "vkdecode/b.py": "import vkdecode.a\n",
            "fusion/__init__.py": "",
        },
    )
    r = subprocess.run([sys.executable, str(SCRIPT), str(root)], check=False, capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "import cycle among vkdecode.a, vkdecode.b" in r.stderr and "1 problem(s)" in r.stdout


def test_a_package_importing_its_submodules_is_no_cycle(tmp_path):
    root = _tree(tmp_path, {"pkg/__init__.py": "from pkg.a import f\n", "pkg/a.py": "def f():\n    pass\n"})
    assert check_layout.problems(root, ("pkg",)) == []


def test_fusion_importing_vkdecode_and_the_line_budgets(tmp_path):
    root = _tree(
        tmp_path,
        {
            "fusion/__init__.py": "",
            "fusion/ir.py": "def f():\n    from vkdecode.vk import device\n",
            "vkdecode/__init__.py": "",
            "vkdecode/vk/__init__.py": "",
            "vkdecode/vk/device.py": "x = 1\n" * (check_layout.MODULE_LINES + 1),
        },
    )
    found = check_layout.problems(root, budget=100)
    assert any("fusion.ir imports vkdecode.vk.device" in p for p in found)
    assert any(p.startswith("vkdecode/vk/device.py: 331 lines > 330") for p in found)
    assert any("lines > BUDGET 100" in p for p in found)
    long_ok = {"vkdecode/vk/device.py": "a test"}
    assert not any("device.py" in p for p in check_layout.problems(root, budget=1000, long_modules=long_ok))

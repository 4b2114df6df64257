"""scripts/config_property.py (the long run of tests/models/test_config_property.py): a few
examples run and the summary counts them."""

from __future__ import annotations

import importlib.util

from tests.helpers.paths import ROOT


def test_a_short_run(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("config_property", ROOT / "scripts" / "config_property.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--examples", "3", "--seed", "1", "--arch", "qwen2", "--models", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 examples in ") and "exact" in out

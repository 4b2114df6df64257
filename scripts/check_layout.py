"""Layout checks for CI: no import cycles in vkdecode/ and fusion/, fusion/ never imports vkdecode,
and a line budget (a total, and per module). Exits non-zero with a readable message. An import
counts wherever it stands (module level, in a function); `import a.b.c` counts as importing a.b.c,
not the packages above it, and `from a.b import c` imports a.b.c where that is a module, else a.b.

    python scripts/check_layout.py [ROOT]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGES = ("vkdecode", "fusion")
BUDGET = 20136  # total lines of vkdecode/ + fusion/ .py files; raise it on purpose, in review
MODULE_LINES = 330
LONG_MODULES: dict[str, str] = {  # "vkdecode/x.py": why it may be longer than MODULE_LINES
    "vkdecode/reference.py": "the numpy oracle of every op in fusion/ir.py, side by side: one file "
    "to read against the IR's semantics (a few lines over, with the padded recurrent chunks)",
}


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the packages."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Modules of `known` that `name` imports anywhere in its body (function-local included)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb from this module's package
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - node.level + 1]
                base = ".".join(pkg + ([base] if base else []))
            # `from pkg import sub` imports the submodule; `from mod import name` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            while t and t not in known:  # `import a.b.c` of a non-module attribute: its module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    known = modules(root, packages)
    return {name: _imports(name, path, known) for name, path in known.items()}


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for w in graph.get(stack.pop(), ()):
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The import cycles as strongly connected components: modules that reach each other."""
    reach = {v: _reach(graph, v) for v in graph}
    return sorted({tuple(sorted(w for w in reach[v] if v in reach[w])) for v in graph if v in reach[v]})


def problems(root: Path, packages=PACKAGES, budget=BUDGET, long_modules=None) -> list[str]:
    long_modules = LONG_MODULES if long_modules is None else long_modules
    graph = import_graph(root, packages)
    out = []
    for comp in cycles(graph):
        edges = [f"{a} -> {b}" for a in comp for b in sorted(graph[a]) if b in comp]
        out.append(f"import cycle among {', '.join(comp)}:\n    " + "\n    ".join(edges))
    for name, deps in sorted(graph.items()):
        bad = sorted(d for d in deps if d.split(".")[0] == "vkdecode")
        if name.split(".")[0] == "fusion" and bad:
            out.append(f"{name} imports {', '.join(bad)} (fusion must not depend on vkdecode)")
    total = 0
    for path in modules(root, packages).values():
        n = len(path.read_text().splitlines())
        total += n
        rel = path.relative_to(root).as_posix()
        if n > MODULE_LINES and rel not in long_modules:
            out.append(f"{rel}: {n} lines > {MODULE_LINES} (split it, or list it in LONG_MODULES with why)")
    if total > budget:
        out.append(f"{' + '.join(PACKAGES)}: {total} lines > BUDGET {budget}")
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    found = problems(root)
    for p in found:
        print(p, file=sys.stderr)
    print(f"check_layout: {len(found)} problem(s)" if found else "check_layout: ok")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

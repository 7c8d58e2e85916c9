"""The dependency rules of DESIGN.md: router -> policies -> classifiers; router -> backends.

Read from the source with `ast` (no import side effects): a package may import only the
packages it is allowed to, and the core packages never import `router`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"router", "decisionlog", "classifiers", "backends", "policies"}
ALLOWED = {
    "router": {"router", "decisionlog", "policies", "classifiers", "backends"},
    # until its readers hand out records only (issue 13, phase 2)
    "decisionlog": {"decisionlog", "policies", "classifiers"},
    "policies": {"policies", "classifiers"},
    "classifiers": {"classifiers"},
    "backends": {"backends"},
}
# Modules that must stay pure: no network, no files, no clock (DESIGN.md "pure core").
PURE = [
    "classifiers/request_view.py", "classifiers/features.py", "classifiers/scores.py",
    "classifiers/rules.py", "policies/decide.py", "decisionlog/records.py", "backends/stats.py",
    "backends/sse.py", "backends/measure.py",
]
IMPURE_MODULES = {"aiohttp", "socket", "time", "os", "subprocess", "asyncio", "datetime", "random", "requests", "pathlib"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_downstream(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted((_imports(path) & OURS) - ALLOWED[package])
        for path in (ROOT / package).rglob("*.py")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"imports against the dependency direction: {offenders}"


@pytest.mark.parametrize("module", PURE)
def test_pure_core_does_no_io(module: str) -> None:
    path = ROOT / module
    used = _imports(path) & IMPURE_MODULES
    assert used == set(), f"{module} is pure core but imports {sorted(used)}"
    assert "Pure" in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")

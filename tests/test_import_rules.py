"""The dependency rules of ARCHITECTURE.md, read from the source with `ast` (no import side
effects).

Packages: `router` -> `policies` -> `classifiers`; `router` -> `backends`; everyone may read the
decision log (`decisionlog`), which imports none of them. Inside the packages, what serves a
request never imports the operator's tools, the trainer or the local build tooling.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"router", "decisionlog", "classifiers", "backends", "policies"}
ALLOWED = {
    "router": {"router", "decisionlog", "policies", "classifiers", "backends"},
    "policies": {"policies", "decisionlog", "classifiers"},
    "classifiers": {"classifiers", "decisionlog"},
    "backends": {"backends"},
    "decisionlog": {"decisionlog"},
}
# Parts of a package that the rest of it must not import: (the part, who may import it).
APART = [
    # the operator's tools: only the CLI starts them
    ("router.ops", ["router/ops/", "router/cli.py"]),
    # add-ons (metrics, dashboard): installed by the app, never called by the request path
    ("router.addons", ["router/addons/", "router/app.py"]),
    # who may read the operator pages: asked by the add-ons that serve them, not the API
    ("router.admin", ["router/admin.py", "router/addons/"]),
    # the HTTP server with its parser errors shaped: run by `serve` only
    ("router.httpserver", ["router/httpserver.py", "router/serve.py"]),
    # training and the corpus builder (scikit-learn, downloads): never on the request path
    ("classifiers.training", ["classifiers/training/", "classifiers/commands.py"]),
    # building llama.cpp and the simulated engine: not the engine adapters
    ("backends.local", ["backends/local/", "backends/commands.py"]),
]
# The serving classifier does not read logs: only its trainer does.
DECISIONLOG_READERS_IN_CLASSIFIERS = ["classifiers/training/"]
# Modules that must stay pure: no network, no files, no clock (ARCHITECTURE.md "pure core").
PURE = [
    "classifiers/request_view.py", "classifiers/features.py", "classifiers/scores.py",
    "classifiers/rules.py", "classifiers/language.py", "policies/decide.py", "policies/observation.py",
    "decisionlog/records.py", "classifiers/training/outcomes.py", "backends/stats.py",
    "backends/sse.py", "backends/measure.py", "backends/openai_error.py",
    "backends/client_view.py", "policies/finish.py", "policies/speedup.py",
    "policies/routemodel.py", "policies/machine.py", "policies/sessions.py",
    "policies/rewrite.py", "policies/pools.py", "policies/route.py",
    "policies/arms.py", "policies/arm_rows.py", "policies/explain_routes.py",
    "router/paths.py", "policies/pace.py", "router/json_body.py",
    "router/upstream_body.py", "router/routing.py", "classifiers/text.py",
    "classifiers/memos.py",
]
IMPURE_MODULES = {
    "aiohttp", "socket", "time", "os", "subprocess", "asyncio", "datetime", "random", "requests",
    "pathlib",
}


def _modules(path: Path) -> set[str]:
    """The dotted names a file imports (absolute imports; `from a import b` gives `a` and
    `a.b`, since `b` may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _imports(path: Path) -> set[str]:
    return {name.split(".")[0] for name in _modules(path)}


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_downstream(package: str) -> None:
    offenders = {
        _relative(path): sorted((_imports(path) & OURS) - ALLOWED[package])
        for path in _sources(package)
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"imports against the dependency direction: {offenders}"


@pytest.mark.parametrize(("part", "importers"), APART, ids=[part for part, _ in APART])
def test_parts_kept_apart_are_imported_only_by_their_own(part: str, importers: list[str]) -> None:
    package = part.split(".")[0]
    offenders = {
        _relative(path): sorted(m for m in _modules(path) if m == part or m.startswith(part + "."))
        for path in _sources(package)
        if not any(_relative(path).startswith(prefix) for prefix in importers)
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"{part} is imported from outside: {offenders}"


def test_only_the_trainer_of_the_classifiers_reads_the_decision_log() -> None:
    offenders = [
        _relative(path) for path in _sources("classifiers")
        if "decisionlog" in _imports(path)
        and not any(_relative(path).startswith(p) for p in DECISIONLOG_READERS_IN_CLASSIFIERS)
    ]
    assert offenders == []


def test_the_rules_see_every_import() -> None:
    """The checks above would pass vacuously on a parser that found nothing."""
    app = _modules(ROOT / "router" / "app.py")
    assert {"router.state", "decisionlog.writer"} <= app
    assert "router.ops.commands" in _modules(ROOT / "router" / "cli.py")


@pytest.mark.parametrize("module", PURE)
def test_pure_core_does_no_io(module: str) -> None:
    path = ROOT / module
    used = _imports(path) & IMPURE_MODULES
    assert used == set(), f"{module} is pure core but imports {sorted(used)}"
    assert "Pure" in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")

"""The dependency rules of ARCHITECTURE.md, read from the source with `ast` (no import side
effects).

Packages: `router` -> `policies` -> `classifiers`; `router` -> `backends`; `router` and `policies` read the
decision log (`decisionlog`), which imports none of them. Inside the packages, what serves a
request never imports the operator's tools, the trainer or the local build tooling.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = {"router", "decisionlog", "classifiers", "backends", "policies", "fileio"}
ALLOWED = {
    "router": {"router", "decisionlog", "policies", "classifiers", "backends", "fileio"},
    "policies": {"policies", "decisionlog", "classifiers", "fileio"},
    "classifiers": {"classifiers"},  # the trainer reads its corpus, never the decision log
    "backends": {"backends"},
    "decisionlog": {"decisionlog"},
    "fileio": {"fileio"},
}
# The three rooms of `policies/` and what each may take from the others: the policy file
# stands alone, the learner reads it, the decision reads both but none of the learner's I/O.
ROOMS = {
    "policies/policyfile/": {"policies.policyfile"},
    "policies/learner/": {"policies.policyfile", "policies.learner"},
    "policies/decision/": {"policies.policyfile", "policies.learner", "policies.decision"},
}
# The rooms of `router/`, from the floor up, and the rooms of `router/` each may import: the
# config and the app's state at the bottom, then the learning loop and the instances, a
# request's plan and record, the replicas, and the front ends and add-ons on top. The top level
# only assembles the app (`ROUTER_TOP`).
_BELOW_REQUEST = {"router.config", "router.state", "router.learning", "router.instances"}
ROUTER_ROOMS = {
    "router/state.py": {"router.config"},
    "router/learning/": {"router.config", "router.state", "router.learning"},
    "router/instances/": {"router.config", "router.state", "router.instances"},
    "router/request/": _BELOW_REQUEST | {"router.request"},
    "router/replicas/": _BELOW_REQUEST | {"router.request", "router.replicas"},
    "router/edge/": _BELOW_REQUEST | {"router.request", "router.replicas", "router.edge"},
    "router/epp/": _BELOW_REQUEST | {"router.request", "router.replicas", "router.edge",
                                     "router.epp"},
    "router/addons/": _BELOW_REQUEST | {"router.request", "router.replicas", "router.edge",
                                        "router.addons"},
}
ROUTER_TOP = {"__init__.py", "__main__.py", "app.py", "cli.py", "config.py", "serve.py",
              "state.py"}
ROOM_MAX_MODULES = 8  # a room past this is split by job
# What `from policies import X` may name (the package's `__all__`, read from its source).
POLICIES_SURFACE: set[str] = set()
LEARNER_IO = {"policies.store", "fileio"}
# Parts of a package that the rest of it must not import: (the part, who may import it).
APART = [
    # the operator's tools: only the CLI starts them
    ("router.ops", ["router/ops/", "router/cli.py"]),
    # add-ons (metrics, dashboard): installed by the app, never called by the request path
    ("router.addons", ["router/addons/", "router/app.py"]),
    # who may read the operator pages: asked by the add-ons that serve them, not the API
    ("router.edge.admin", ["router/edge/admin.py", "router/addons/"]),
    # the HTTP server with its parser errors shaped: run by `serve` only
    ("router.edge.httpserver", ["router/edge/httpserver.py", "router/serve.py"]),
    # training and the corpus builder (scikit-learn, downloads): never on the request path
    ("classifiers.training", ["classifiers/training/", "classifiers/classifier_commands.py"]),
    # building llama.cpp and the simulated engine: not the engine adapters
    ("backends.local", ["backends/local/", "backends/backend_commands.py"]),
]
# Modules that must stay pure: no network, no files, no clock (ARCHITECTURE.md "pure core").
PURE = [
    "classifiers/request_view.py", "classifiers/features.py", "classifiers/scores.py",
    "classifiers/rules.py", "classifiers/language.py", "policies/decision/decide.py",
    "policies/learner/observation.py", "decisionlog/records.py",
    "backends/stats.py", "backends/sse.py",
    "backends/measure.py", "backends/openai_error.py", "backends/client_view.py",
    "policies/decision/finish.py", "policies/learner/speedup.py",
    "policies/learner/routemodel.py", "policies/policyfile/machine.py",
    "policies/decision/sessions.py", "policies/policyfile/rewrite.py",
    "policies/policyfile/pools.py", "policies/decision/route.py", "policies/learner/arms.py",
    "policies/learner/arm_rows.py", "policies/explain_routes.py", "router/edge/paths.py",
    "policies/learner/pace.py", "policies/decision/pins.py", "policies/decision/ask.py",
    "policies/policyfile/words.py", "router/request/json_body.py", "router/request/upstream_body.py",
    "router/request/routing.py", "classifiers/text.py", "classifiers/memos.py",
    "backends/gauges.py", "policies/learner/shared.py", "router/epp/messages.py",
    "router/instances/contention.py", "classifiers/copying.py", "router/replicas/wire.py",
    "backends/slots.py",
]
IMPURE_MODULES = {
    "aiohttp", "socket", "time", "os", "subprocess", "asyncio", "datetime", "random", "requests",
    "pathlib",
}


def _surface(init: Path) -> set[str]:
    for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {elt.value for elt in node.value.elts  # type: ignore[attr-defined]
                    if isinstance(elt, ast.Constant)}
    return set()


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


POLICIES_SURFACE.update(_surface(ROOT / "policies" / "__init__.py"))


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


@pytest.mark.parametrize("room", sorted(ROOMS))
def test_each_room_of_policies_imports_only_what_it_may(room: str) -> None:
    offenders = {}
    for path in sorted((ROOT / room).rglob("*.py")):
        ours = {m for m in _modules(path) if m.startswith("policies.") and m.count(".") >= 2}
        rooms = {".".join(m.split(".")[:2]) for m in ours}
        wrong = sorted(rooms - ROOMS[room])
        if room == "policies/decision/":
            wrong += sorted(m for m in _modules(path) if m.split(".")[0] == "fileio"
                            or any(m == io or m.startswith(io + ".") for io in LEARNER_IO))
        if wrong:
            offenders[_relative(path)] = wrong
    assert offenders == {}, f"imports across the rooms of policies/: {offenders}"


@pytest.mark.parametrize("room", sorted(ROUTER_ROOMS))
def test_each_room_of_router_imports_only_the_rooms_below(room: str) -> None:
    paths = [ROOT / room] if room.endswith(".py") else sorted((ROOT / room).rglob("*.py"))
    offenders = {}
    for path in paths:
        rooms = {".".join(m.split(".")[:2]) for m in _modules(path)
                 if m.startswith("router.")}
        if wrong := sorted(rooms - ROUTER_ROOMS[room]):
            offenders[_relative(path)] = wrong
    assert offenders == {}, f"imports across the rooms of router/: {offenders}"


def test_router_top_level_only_assembles_the_app() -> None:
    top = {path.name for path in (ROOT / "router").glob("*.py")}
    assert top - ROUTER_TOP == set(), "a module of router/'s top level belongs in a room"
    rooms = {path.parent for path in (ROOT / "router").glob("*/*.py")}
    assert {f"router/{room}/" for room in ("edge", "request", "instances", "learning",
                                           "replicas")} <= {f"{_relative(r)}/" for r in rooms}
    crowded = {_relative(room): n for room in rooms
               if (n := len([p for p in room.glob("*.py") if p.name != "__init__.py"]))
               > ROOM_MAX_MODULES}
    assert crowded == {}, f"rooms of router/ past {ROOM_MAX_MODULES} modules: {crowded}"


def test_router_uses_policies_through_its_public_surface() -> None:
    """`policies/__init__` names what `router/` may use; the CLI also starts `policies.policy_commands`."""
    offenders = {
        _relative(path): sorted(m for m in _modules(path) if m.startswith("policies.")
                                and not m.startswith("policies.policy_commands")
                                and m.removeprefix("policies.") not in POLICIES_SURFACE)
        for path in _sources("router")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}, f"router/ reaches inside policies/: {offenders}"


def test_the_rules_see_every_import() -> None:
    """The checks above would pass vacuously on a parser that found nothing."""
    app = _modules(ROOT / "router" / "app.py")
    assert {"router.state", "decisionlog.writer"} <= app
    assert "router.ops.ops_commands" in _modules(ROOT / "router" / "cli.py")


@pytest.mark.parametrize("module", PURE)
def test_pure_core_does_no_io(module: str) -> None:
    path = ROOT / module
    used = _imports(path) & IMPURE_MODULES
    assert used == set(), f"{module} is pure core but imports {sorted(used)}"
    assert "Pure" in (ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "")

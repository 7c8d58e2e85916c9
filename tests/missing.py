"""What a test needs from outside the venv, and the one line at the end of a run that says what
was skipped without it and how to install it.

A test that cannot run without a system package or a cached build calls `skip_missing(...)`:
it skips, naming what is missing (or fails, with its `require` variable set, as in CI:
SPECROUTE_REQUIRE_LOCAL for all but vLLM, SPECROUTE_REQUIRE_VLLM for vLLM, which `make test`
does not install: 3.5 GB, `make vllm`). The
end of the run (`pytest_unconfigure`, registered by tests/conftest.py) then prints one line,
the last: how many tests were skipped, for what, and the one command that installs all of it.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import pytest

TAG = re.compile(r"\[missing: ([a-z0-9-]+)\]")


@dataclass(frozen=True)
class Missing:
    key: str
    what: str
    apt: str = ""  # the Debian package that installs it
    make: str = ""  # or the make target that builds it into the cache
    require: str = "SPECROUTE_REQUIRE_LOCAL"  # set: its tests fail rather than skip

    @property
    def install(self) -> str:
        return install_command([self])


REDIS = Missing("redis-server", "redis-server is not installed", apt="redis-server")
CHROMIUM = Missing("chromium", "Debian's chromium is not installed", apt="chromium")
NGINX = Missing("nginx", "nginx is not installed", apt="nginx")
ENVOY = Missing("envoy", "Envoy 1.40 is not cached", make="envoy")
SMOLLM2 = Missing("smollm2", "the local SmolLM2 pair is not cached", make="local-backend")
VLLM = Missing("vllm", "vLLM (CPU) and its models are not cached", make="vllm",
               require="SPECROUTE_REQUIRE_VLLM")
KNOWN = {m.key: m for m in (REDIS, CHROMIUM, NGINX, ENVOY, SMOLLM2, VLLM)}


def skip_missing(missing: Missing) -> NoReturn:
    reason = f"{missing.what} [missing: {missing.key}]: {missing.install}"
    if os.environ.get(missing.require):
        pytest.fail(f"{reason} [{missing.require} is set]")
    pytest.skip(reason)


def install_command(missing: Iterable[Missing], root: bool | None = None) -> str:
    """One command for all of it: apt first (a build may need it), then the make targets."""
    missing = list(missing)
    root = os.geteuid() == 0 if root is None else root
    apt = sorted({m.apt for m in missing if m.apt})
    make = sorted({m.make for m in missing if m.make})
    parts = []
    if apt:
        parts.append(("" if root else "sudo ") + "apt-get install -y " + " ".join(apt))
    if make:
        parts.append("make " + " ".join(make))
    return " && ".join(parts)


def summary_line(reasons: Sequence[str], root: bool | None = None) -> str:
    """The run's skips in one line: per missing thing (else per reason) how many, then the
    command that installs what is missing."""
    if not reasons:
        return "skipped: nothing"
    counts: Counter[str] = Counter()
    missing: dict[str, Missing] = {}
    for reason in reasons:
        tag = TAG.search(reason)
        if tag and tag.group(1) in KNOWN:
            m = KNOWN[tag.group(1)]
            missing[m.key] = m
            counts[m.what] += 1
        else:
            counts[reason.removeprefix("Skipped: ")] += 1
    parts = ", ".join(f"{n} because {why}" for why, n in counts.most_common())
    line = f"skipped: {len(reasons)} tests, {parts}"
    if missing:
        line += f"; to run them: {install_command(missing.values(), root)}"
    return line


def pytest_unconfigure(config: pytest.Config) -> None:
    """After pytest's own counts: the run's very last line."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    reasons = [_reason(r) for r in reporter.stats.get("skipped", [])]
    reporter.write_line(summary_line(reasons))


def _reason(report: object) -> str:
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)

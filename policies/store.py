"""The policy in force, hot-reloaded: the policy YAML and the learned state next to it.

The edge around the pure core: reads files and logs, reads no clock (`now` is passed in).
A changed file is parsed and validated whole, then one immutable `Snapshot` is swapped in;
on failure the last good snapshot stays in force and `policy_reload_failed` is logged with
the file, line and field of every problem. The learned state is written atomically (a temp
file in the same directory, then `os.replace`), so a reader never sees half a file.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

import structlog

from fileio.reload import Reloader, write_atomically
from fileio.yamlfile import ConfigError, load_model
from policies.learner.learn import learn
from policies.learner.learned import (
    EMPTY_STATE,
    LearnedState,
    LearnedStateError,
    from_json,
    to_json,
)
from policies.learner.observation import Observation
from policies.learner.routemodel import RouteModel
from policies.policyfile.machine import BUILTIN, NEUTRAL, MachinePrior, PriorFile, builtin_prior
from policies.policyfile.pools import pool_context
from policies.policyfile.schema import Policy

LEARNED_SUFFIX: Final = ".learned.json"
OLD_ARMS_SUFFIX: Final = ".arms.json"  # the arms' own file before learned-state version 4
# The policy shipped in the package, wherever it is installed.
DEFAULT_POLICY: Final = str(importlib.resources.files("policies") / "default.yaml")
# `path:line: field: message`, as `fileio.yamlfile` writes problems.
_PROBLEM = re.compile(r"^(?P<file>.*?):(?P<line>\d+): (?:(?P<field>[^:]+): )?(?P<message>.*)$")

log = structlog.get_logger("specroute.policy")


def learned_path_for(policy_path: str | Path, replica: str = "") -> Path:
    """Where the learned state for a policy lives: `default.yaml` -> `default.learned.json`;
    one replica's, among several on one host: `default.learned.<replica>.json`."""
    path = Path(policy_path)
    if not replica:
        return path.with_name(path.stem + LEARNED_SUFFIX)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", replica)
    return path.with_name(f"{path.stem}.learned.{safe}.json")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The policy (with its machine prior, resolved) and learned state in force."""

    policy: Policy
    learned: LearnedState
    loaded_at: float = 0.0
    prior: MachinePrior = NEUTRAL

    @property
    def model(self) -> RouteModel:
        """The route model from the prior and the learned evidence (no online updates)."""
        return RouteModel(self.prior, self.learned.evidence)


@dataclass
class ReloadCounters:
    ok: int = 0
    failed: dict[str, int] = field(default_factory=lambda: {"policy": 0, "learned": 0})


class PolicyStore:
    """Holds the current `Snapshot`; `reload_if_changed` swaps in new files that validate."""

    def __init__(
        self,
        policy_path: str | Path,
        learned_path: str | Path | None = None,
        *,
        now: float = 0.0,
        pools: Iterable[str] = (),
    ) -> None:
        """Load both files; an invalid policy raises `ConfigError` (nothing to fall back to),
        a missing learned file means nothing learned yet, an invalid one is logged and
        ignored. `pools`: the named pools of the config, which the policy's routes may name
        (checked on load and on every reload)."""
        self.policy_path = Path(policy_path)
        self._context = pool_context(pools)
        self.learned_path = Path(learned_path) if learned_path else learned_path_for(policy_path)
        self.counters = ReloadCounters()
        # A deleted policy keeps the policy in force; a deleted learned state: nothing learned.
        self._policy_file = Reloader(
            self.policy_path, lambda path: _read_policy(path, self._context),
            errors=(ConfigError,),
            on_error=lambda exc: self._failed("policy", self.policy_path, exc),
        )
        self._learned_file = Reloader(
            self.learned_path, _read_learned, errors=(OSError, LearnedStateError),
            on_error=lambda exc: self._failed("learned", self.learned_path, exc),
            if_deleted=lambda: EMPTY_STATE,
        )
        policy, prior = _read_policy(self.policy_path, self._context)
        self._snapshot = Snapshot(policy, self._initial_learned(), loaded_at=now, prior=prior)

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def policy(self) -> Policy:
        return self._snapshot.policy

    @property
    def learned(self) -> LearnedState:
        return self._snapshot.learned

    def put_learned(self, state: LearnedState, now: float) -> None:
        """The proxy's own learner hands over the state it has just written: in force at once
        (the same one holder the online path adds to), the file not read back."""
        self._learned_file.mark_seen()
        self._snapshot = replace(self._snapshot, learned=state, loaded_at=now)
        self.counters.ok += 1

    def reload_if_changed(self, now: float) -> bool:
        """Re-read whichever file changed since the last look; True when a new snapshot is in
        force."""
        policy = self._policy_file.reload()
        learned = self._learned_file.reload()
        if policy is None and learned is None:
            return False
        current = self._snapshot
        self._snapshot = Snapshot(
            policy[0] if policy is not None else current.policy,
            learned if learned is not None else current.learned,
            loaded_at=now,
            prior=policy[1] if policy is not None else current.prior,
        )
        self.counters.ok += 1
        log.info(
            "policy_reloaded",
            policy=str(self.policy_path) if policy is not None else None,
            learned=str(self.learned_path) if learned is not None else None,
        )
        return True

    def _initial_learned(self) -> LearnedState:
        superseded = self.learned_path.with_name(
            self.learned_path.name.removesuffix(LEARNED_SUFFIX) + OLD_ARMS_SUFFIX)
        if superseded.exists():  # before version 4 the arms' stats had a file of their own
            log.warning("arms_file_superseded", file=str(superseded),
                        detail=f"the arms' sums now live in {self.learned_path}, relearned from "
                               "the decision log at the next learning run; this file is not "
                               "read and may be removed")
        if not self.learned_path.exists():
            return EMPTY_STATE
        try:
            return _read_learned(self.learned_path)
        except (OSError, LearnedStateError) as exc:
            self._failed("learned", self.learned_path, exc)
            return EMPTY_STATE

    def _failed(self, kind: str, path: Path, exc: Exception) -> None:
        self.counters.failed[kind] += 1
        # `file:line: field: message`; a learned file's errors are about its line 1
        problems = exc.problems if isinstance(exc, ConfigError) else [f"{path}:1: {exc}"]
        first = _PROBLEM.match(problems[0]) if problems else None
        log.error(
            "policy_reload_failed",
            kind=kind,
            file=str(path),
            line=int(first["line"]) if first else None,
            field=first["field"] if first else None,
            problems=problems,
        )


def _read_policy(path: Path, context: dict[str, Any]) -> tuple[Policy, MachinePrior]:
    policy = load_model(path, Policy, context=context)
    return policy, load_prior(policy, path)


def load_prior(policy: Policy, policy_path: str | Path) -> MachinePrior:
    """The policy's machine prior: a built-in profile by name, else a YAML file (relative to
    the policy file); a bad file raises `ConfigError` naming it."""
    prior = builtin_prior(policy.prior)
    if prior is not None:
        return prior
    path = Path(policy.prior)
    if not path.is_absolute():
        path = Path(policy_path).parent / path
    if not path.is_file():
        problem = (f"{policy_path}:1: prior: {policy.prior!r} is neither a built-in machine "
                   f"profile ({', '.join(BUILTIN)}) nor a file")
        raise ConfigError(str(policy_path), [problem])
    try:
        return load_model(path, PriorFile).prior(str(path))
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(str(path), [f"{path}:1: {exc}"]) from exc


def _read_learned(path: Path) -> LearnedState:
    return from_json(path.read_text(encoding="utf-8"))


def write_learned(path: str | Path, state: LearnedState) -> None:
    """Write the learned state so that a reader sees the old file or the new, never half."""
    write_atomically(path, to_json(state))


def learn_to_file(
    observations: Iterable[Observation], policy: Policy, out: str | Path, *, created: str
) -> LearnedState:
    """Learn under `policy` and write the state atomically (the store then hot-reloads it):
    `specroute learn` and the proxy's background learner (in a worker thread)."""
    state = learn(
        observations,
        min_samples=policy.exploration.min_samples,
        assume=policy.assume,
        created=created,
    )
    write_learned(out, state)
    return state

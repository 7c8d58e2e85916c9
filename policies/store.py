"""The policy in force, hot-reloaded: the policy YAML and the learned state next to it.

The edge around the pure core: reads files and logs, reads no clock (`now` is passed in).
A changed file is parsed and validated whole, then one immutable `Snapshot` is swapped in;
on failure the last good snapshot stays in force and `policy_reload_failed` is logged with
the file, line and field of every problem. The learned state is written atomically (a temp
file in the same directory, then `os.replace`), so a reader never sees half a file.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import structlog

from policies.learned import EMPTY_STATE, LearnedState, LearnedStateError, from_json, to_json
from policies.pools import pool_context
from policies.schema import Policy
from policies.yamlfile import ConfigError, load_model

LEARNED_SUFFIX: Final = ".learned.json"
# `path:line: field: message`, as `policies.yamlfile` writes problems.
_PROBLEM = re.compile(r"^(?P<file>.*?):(?P<line>\d+): (?:(?P<field>[^:]+): )?(?P<message>.*)$")

log = structlog.get_logger("specroute.policy")

Signature = tuple[int, int, int]  # (inode, size, mtime_ns): os.replace changes the inode


def learned_path_for(policy_path: str | Path) -> Path:
    """Where the learned state for a policy lives: `default.yaml` -> `default.learned.json`."""
    path = Path(policy_path)
    return path.with_name(path.stem + LEARNED_SUFFIX)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The policy and learned state in force, and what they were read from."""

    policy: Policy
    learned: LearnedState
    policy_signature: Signature | None
    learned_signature: Signature | None
    loaded_at: float = 0.0


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
        policy = load_model(self.policy_path, Policy, context=self._context)
        learned, learned_sig = self._read_learned_or_empty()
        self._snapshot = Snapshot(
            policy, learned, _signature(self.policy_path), learned_sig, loaded_at=now
        )

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def policy(self) -> Policy:
        return self._snapshot.policy

    @property
    def learned(self) -> LearnedState:
        return self._snapshot.learned

    def reload_if_changed(self, now: float) -> bool:
        """Re-read whichever file changed since the last look; True when a new snapshot is in
        force."""
        current = self._snapshot
        new, changed_policy = self._with_new_policy(current)
        new, changed_learned = self._with_new_learned(new)
        if not (changed_policy or changed_learned):
            self._snapshot = new  # may remember the signature of a file that failed
            return False
        self._snapshot = replace(new, loaded_at=now)
        self.counters.ok += 1
        log.info(
            "policy_reloaded",
            policy=str(self.policy_path) if changed_policy else None,
            learned=str(self.learned_path) if changed_learned else None,
        )
        return True

    def _with_new_policy(self, snapshot: Snapshot) -> tuple[Snapshot, bool]:
        """The snapshot with the policy file re-read if it changed (a deleted file keeps the
        policy in force); a file that fails is remembered so that one bad save is reported
        once."""
        signature = _signature(self.policy_path)
        if signature is None or signature == snapshot.policy_signature:
            return snapshot, False
        policy = self._read_policy()
        new = replace(snapshot, policy=policy or snapshot.policy, policy_signature=signature)
        return new, policy is not None

    def _with_new_learned(self, snapshot: Snapshot) -> tuple[Snapshot, bool]:
        """The snapshot with the learned file re-read if it changed (deleted: nothing learned)."""
        signature = _signature(self.learned_path)
        if signature == snapshot.learned_signature:
            return snapshot, False
        learned = self._read_learned() if signature is not None else EMPTY_STATE
        new = replace(snapshot, learned=learned or snapshot.learned, learned_signature=signature)
        return new, learned is not None

    def _read_policy(self) -> Policy | None:
        try:
            return load_model(self.policy_path, Policy, context=self._context)
        except ConfigError as exc:
            self._failed("policy", str(self.policy_path), exc.problems)
            return None

    def _read_learned(self) -> LearnedState | None:
        try:
            return from_json(self.learned_path.read_text(encoding="utf-8"))
        except (OSError, LearnedStateError) as exc:
            self._failed("learned", str(self.learned_path), [f"{self.learned_path}:1: {exc}"])
            return None

    def _read_learned_or_empty(self) -> tuple[LearnedState, Signature | None]:
        signature = _signature(self.learned_path)
        if signature is None:
            return EMPTY_STATE, None
        return self._read_learned() or EMPTY_STATE, signature

    def _failed(self, kind: str, path: str, problems: list[str]) -> None:
        self.counters.failed[kind] += 1
        first = _PROBLEM.match(problems[0]) if problems else None
        log.error(
            "policy_reload_failed",
            kind=kind,
            file=path,
            line=int(first["line"]) if first else None,
            field=first["field"] if first else None,
            problems=problems,
        )


def write_learned(path: str | Path, state: LearnedState) -> None:
    """Write the learned state so that a reader sees the old file or the new, never half."""
    target = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(to_json(state))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _signature(path: Path) -> Signature | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)

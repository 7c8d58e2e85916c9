"""The arms' learned stats on disk, next to the policy (`default.yaml` -> `default.arms.json`).

The edge around `policies.learner.arms`: reads and writes a file, nothing else. Written atomically (a
temp file in the same directory, then `os.replace`); a missing or unreadable file means nothing
learned about arms yet (a bad file is logged and ignored, the state in force stays).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import structlog

from fileio.reload import Reloader, write_atomically
from policies.learner.arms import (
    EMPTY_ARMS,
    ArmsState,
    ArmsStateError,
    arms_from_json,
    arms_to_json,
)

ARMS_SUFFIX: Final = ".arms.json"

log = structlog.get_logger("specroute.policy")


def arms_path_for(policy_path: str | Path) -> Path:
    path = Path(policy_path)
    return path.with_name(path.stem + ARMS_SUFFIX)


def read_arms(path: str | Path) -> ArmsState | None:
    """The state in `path`; None when it is missing or not an arms state (logged)."""
    try:
        return arms_from_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ArmsStateError) as exc:
        log.warning("arms_state_unreadable", file=str(path), error=str(exc))
        return None


def write_arms(path: str | Path, state: ArmsState) -> None:
    write_atomically(path, arms_to_json(state))


class ArmsHolder:
    """The arms' state in force; `reload_if_changed` picks up a file `specroute learn` wrote
    (`fileio.reload`: a deleted file keeps the state in force, a bad one is logged once),
    `set` one the proxy's own learner computed."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = Reloader(
            self.path, _load_arms, errors=(OSError, ArmsStateError),
            on_error=lambda exc: log.warning(
                "arms_state_unreadable", file=str(self.path), error=str(exc)),
        )
        self.state: ArmsState = read_arms(self.path) or EMPTY_ARMS

    def set(self, state: ArmsState) -> None:
        self.state = state
        self._file.mark_seen()

    def reload_if_changed(self) -> bool:
        state = self._file.reload()
        if state is None:
            return False
        self.state = state
        return True


def _load_arms(path: Path) -> ArmsState:
    return arms_from_json(path.read_text(encoding="utf-8"))

"""The scorer in force: the trained artifact when configured (hot-reloaded), else the rules.

A new artifact that does not load leaves the old one in force.
"""

from __future__ import annotations

from pathlib import Path

import structlog
from aiohttp import web

from classifiers.scorer import Scorer, load_scorer
from fileio.reload import Reloader

log = structlog.get_logger("specroute")


class ScorerHolder:
    """Keeps the current scorer; `reload_if_changed` swaps in a new artifact when it loads."""

    def __init__(self, path: str, scorer: Scorer | None = None) -> None:
        self.path = path
        self.current: Scorer = scorer if scorer is not None else load_scorer(path)
        self.reloads_ok = 0
        # "default" and "rules" name no file to watch
        self._file = None if path in ("", "rules", "default") else Reloader(
            Path(path), lambda file: load_scorer(str(file)), errors=(Exception,),
            on_error=lambda exc: log.warning("classifier_reload_failed", path=path, error=str(exc)),
        )

    @property
    def reloads_failed(self) -> int:
        return self._file.failed if self._file is not None else 0

    def reload_if_changed(self) -> bool:
        """A bad artifact leaves the old one in force (logged and counted)."""
        scorer = self._file.reload() if self._file is not None else None
        if scorer is None:
            return False
        self.current = scorer
        self.reloads_ok += 1
        log.info("classifier_reloaded", path=self.path, artifact=self.current.name)
        return True


SCORER = web.AppKey("scorer", ScorerHolder)

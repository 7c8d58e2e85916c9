"""The scorer in force: the trained artifact when configured (hot-reloaded), else the rules.

A scorer that raises never fails a request: `score_safely` returns None and the reason, and
the policy's fallback applies. A new artifact that does not load leaves the old one in force.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from classifiers import rules
from classifiers.features import Features
from classifiers.request_view import RequestView
from classifiers.scores import Scores
from fileio.reload import Reloader

log = structlog.get_logger("specroute")


class Scorer(Protocol):
    @property
    def name(self) -> str: ...

    def score(self, view: RequestView, features: Features) -> Scores: ...


class RuleScorer:
    name = rules.ARTIFACT_NAME

    def score(self, view: RequestView, features: Features) -> Scores:
        return rules.score(view, features)


@dataclass(frozen=True, slots=True)
class ScoreOutcome:
    scores: Scores | None
    error: str = ""


def score_safely(scorer: Scorer, view: RequestView, features: Features) -> ScoreOutcome:
    try:
        return ScoreOutcome(scorer.score(view, features))
    except Exception as exc:  # noqa: BLE001  # any scorer bug degrades to the fallback
        return ScoreOutcome(None, f"{type(exc).__name__}: {exc}")


def load_scorer(path: str) -> Scorer:
    """The scorer named by the config: "default" (the shipped artifact), "rules" (or empty),
    or an artifact path. Raises `ArtifactError` on a bad artifact."""
    if path in ("", "rules"):
        return RuleScorer()
    from classifiers.model import DEFAULT_ARTIFACT, load_artifact  # numpy only

    scorer: Scorer = load_artifact(DEFAULT_ARTIFACT if path == "default" else path)
    return scorer


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

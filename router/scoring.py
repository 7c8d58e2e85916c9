"""The scorer in force: the trained artifact when configured (hot-reloaded), else the rules.

A scorer that raises never fails a request: `score_safely` returns None and the reason, and
the policy's fallback applies. A new artifact that does not load leaves the old one in force.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

import structlog

from classifiers import rules
from classifiers.features import Features
from classifiers.request_view import RequestView
from classifiers.scores import Scores

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
        self._stamp = self._file_stamp()
        self.reloads_ok = 0
        self.reloads_failed = 0

    def reload_if_changed(self) -> bool:
        stamp = self._file_stamp()
        if stamp == self._stamp or stamp is None:
            return False
        self._stamp = stamp
        try:
            self.current = load_scorer(self.path)
        except Exception as exc:  # noqa: BLE001  # a bad artifact leaves the old one in force
            self.reloads_failed += 1
            log.warning("classifier_reload_failed", path=self.path, error=str(exc))
            return False
        self.reloads_ok += 1
        log.info("classifier_reloaded", path=self.path, artifact=self.current.name)
        return True

    def _file_stamp(self) -> tuple[int, int] | None:
        if self.path in ("", "rules", "default"):
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

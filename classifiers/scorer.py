"""What scores a request: the `Scorer` protocol, the rules as one (`RuleScorer`), the scorer a
config names (`load_scorer`: the trained artifact or the rules), and `score_safely`.

A scorer that raises never fails a request: `score_safely` returns None and the reason, and
the policy's fallback applies. The proxy keeps the one in force and hot-reloads it
(`router/learning/scorer_holder`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from classifiers import rules
from classifiers.features import Features
from classifiers.request_view import RequestView
from classifiers.scores import Scores


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

"""What a classifier says about a request: class probabilities, language, and `p_spec`.

Pure: plain data. Every scorer (the rule-based guess, the trained model) returns `Scores`, so
the policy reads one shape whichever produced it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

CLASSES: Final = ("agent", "code", "technical", "prose", "chat")

# A prior on how guessable each class's reply is (the GB10 ranking: agent > code > technical >
# prose ~ chat), used to turn class probabilities into p_spec until the learner refines it.
CLASS_SPEC_PRIOR: Final[Mapping[str, float]] = {
    "agent": 0.85,
    "code": 0.75,
    "technical": 0.6,
    "prose": 0.3,
    "chat": 0.3,
}


@dataclass(frozen=True, slots=True)
class Scores:
    """A classifier's verdict on one request."""

    top_class: str
    lang: str
    scores: Mapping[str, float] = field(default_factory=dict)
    p_spec: float = 0.5
    artifact: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "class": self.top_class,
            "lang": self.lang,
            "scores": {k: round(v, 4) for k, v in self.scores.items()},
            "p_spec": round(self.p_spec, 4),
            "artifact": self.artifact,
        }


def p_spec_from_classes(scores: Mapping[str, float]) -> float:
    """Expected speculation prior under the class distribution."""
    total = sum(scores.values()) or 1.0
    return sum(CLASS_SPEC_PRIOR.get(c, 0.5) * p for c, p in scores.items()) / total

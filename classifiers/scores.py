"""What a classifier says about a request: class probabilities and language.

Pure: plain data. Every scorer (the rule-based guess, the trained model) returns `Scores`, so
the policy reads one shape whichever produced it. Whether speculation pays for the request
(`p_spec`) is not the classifier's to say: the decision's route model predicts it, from the
features and these class probabilities (`policies.decision.decide.Decision.p_spec`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

CLASSES: Final = ("agent", "code", "technical", "prose", "chat")


@dataclass(frozen=True, slots=True)
class Scores:
    """A classifier's verdict on one request."""

    top_class: str
    lang: str
    scores: Mapping[str, float] = field(default_factory=dict)
    artifact: str = ""
    # the probabilities as logged, rounded once: the decision and the record read them both
    _logged: dict[str, float] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_logged", {k: round(v, 4) for k, v in self.scores.items()})

    def as_dict(self) -> dict[str, object]:
        return {
            "class": self.top_class,
            "lang": self.lang,
            "scores": dict(self._logged),  # the record's own: a line may be changed
            "artifact": self.artifact,
        }

    def logged_scores(self) -> Mapping[str, float]:
        """The probabilities as the decision log has them (4 decimals): what the route model
        reads, at the decision and in the learner alike."""
        return self._logged

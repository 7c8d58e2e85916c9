"""What the proxy observed for one request, as the trainer takes it from a decision-log record.

Pure: a frozen dataclass and a function of the record (`decisionlog.records`); no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from decisionlog.records import RouteRecord


@dataclass(frozen=True, slots=True)
class LoggedOutcome:
    features: Mapping[str, float | int | bool]  # the logged request features, by name
    top_class: str  # the class the classifier gave at the time
    lang: str
    profile: str  # "mtp" | "plain": the profile that served the request
    acceptance: float | None  # draft tokens accepted / drafted, when the backend reported it
    decode_tps: float | None  # measured decode tokens/s


def outcome_from_record(record: RouteRecord) -> LoggedOutcome | None:
    """The outcome of one served request, or None when it failed or names no class."""
    profile = record.outcome.profile
    cls = record.classifier.get("class")
    if record.outcome.status != 200 or profile not in ("mtp", "plain") or not cls:
        return None
    return LoggedOutcome(
        features=record.features,
        top_class=str(cls),
        lang=str(record.classifier.get("lang") or "en"),
        profile=profile,
        acceptance=record.acceptance,
        decode_tps=record.outcome.decode_tps or record.outcome.backend_tps,
    )


def logged_outcomes(records: Iterable[RouteRecord]) -> Iterator[LoggedOutcome]:
    """What the trainer needs from each successful record."""
    for record in records:
        outcome = outcome_from_record(record)
        if outcome is not None:
            yield outcome

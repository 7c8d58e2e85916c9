"""Decision-log readers injected into the other packages' commands.

The log schema lives in `decisionlog.records`; `policies` and `classifiers` must not import `router`,
so their commands receive these functions. Every reader goes through the rotated set oldest
first and reports what it skipped (unknown schema versions, torn or foreign lines) on stderr.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import asdict

from classifiers.training.outcomes import LoggedOutcome
from decisionlog.records import ReadStats, RouteRecord
from decisionlog.writer import iter_log_records
from policies.arms import ArmObservation, arm_observation_from_log
from policies.learn import Observation, observation_from_log


def read_records(paths: list[str]) -> Iterator[RouteRecord]:
    stats = ReadStats()
    yield from iter_log_records(paths, stats)
    print(f"read {', '.join(paths)}: {stats.summary()}", file=sys.stderr)


def read_observations(paths: list[str]) -> Iterator[Observation]:
    """What the learner needs from each record (records that taught nothing are dropped)."""
    for record in read_records(paths):
        observation = observation_from_log(asdict(record))
        if observation is not None:
            yield observation


def read_arm_observations(paths: list[str]) -> Iterator[ArmObservation]:
    """What the arms' comparison needs from each record (pool, rewrite, decode rate, time)."""
    for record in read_records(paths):
        observation = arm_observation_from_log(asdict(record))
        if observation is not None:
            yield observation


def read_log_outcomes(paths: list[str]) -> Iterator[LoggedOutcome]:
    """What the classifier's trainer needs from each successful record."""
    for record in read_records(paths):
        profile = record.outcome.profile
        cls = record.classifier.get("class")
        if record.outcome.status != 200 or profile not in ("mtp", "plain") or not cls:
            continue
        yield LoggedOutcome(
            features=record.features,
            top_class=str(cls),
            lang=str(record.classifier.get("lang") or "en"),
            profile=profile,
            acceptance=record.acceptance,
            decode_tps=record.outcome.decode_tps or record.outcome.backend_tps,
        )

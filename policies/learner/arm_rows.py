"""Per class and arm (pool plus rewrite) aggregates of decision-log records: what `report` and
the dashboard show about the arms: each speculation config, pool and rewrite the requests went to.

Pure: functions over `RouteRecord`s (the statistics are `policies.learner.arms`'s, so that what is shown
is what the learner compares); no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from decisionlog.records import RouteRecord
from policies.learner.arms import learn_arms
from policies.learner.observation import observations
from policies.policyfile.words import ANY_LANG


@dataclass(frozen=True, slots=True)
class ArmRow:
    cls: str
    arm: str
    requests: int
    share: float  # of the class's measured requests
    decode_tps: float
    total_ms: float
    completion_tokens: float


def arm_rows(records: Iterable[RouteRecord]) -> list[ArmRow]:
    """One row per class and arm, classes by name, arms by requests (most first)."""
    state = learn_arms(observations(records))
    rows: list[ArmRow] = []
    for key, arms in sorted(state.stats.items()):
        cls, _, lang = key.partition("/")
        if lang != ANY_LANG:
            continue
        n = sum(s.n for s in arms.values())
        for s in sorted(arms.values(), key=lambda s: (-s.n, s.arm)):
            rows.append(ArmRow(cls, s.arm, s.n, s.n / n, s.decode_tps, s.total_ms,
                               s.completion_tokens))
    return rows


def has_extra_arms(rows: Iterable[ArmRow]) -> bool:
    """Whether any request went beyond the mtp and plain arms (another config, a pool or a rewrite)."""
    return any(row.arm not in ("mtp", "plain") for row in rows)

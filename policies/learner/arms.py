"""The arms of a route: each (pool, rewrite) a policy route allows, measured and compared.

Pure: decision-log records in, an `ArmsState` out, and the choice of an arm for
one request from that state and a uniform draw; no I/O, no clock, no globals.

Arms that send the same request (the same rewrite, or none that changes the answer) produce the
same answer, so they are compared on decode rate. Arms whose rewrites change the answer's length
(thinking on or off, a different model alias, a length cap) are compared on the total time to
the answer, as measured by the proxy. A route's first arm is its default until every arm has
`min_samples` requests of the class; exploration only ever picks among the route's own arms,
so it never sends a request into a rewrite the policy did not allow.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

from decisionlog.records import RouteRecord
from policies.learner.learned import normal_cdf
from policies.policyfile.pools import Arm

ANY_LANG: Final = "*"
CONCLUSIVE: Final = 0.01  # below this chance of the ranking being wrong: no exploration
COLD_START_SHARE: Final = 0.5  # share of a route's requests sent to its arms with too few samples
METRIC_DECODE: Final = "decode_tps"
METRIC_TOTAL: Final = "total_ms"


@dataclass(frozen=True, slots=True)
class ArmObservation:
    """One served request, as the arms' comparison needs it."""

    cls: str
    lang: str
    arm: str  # the arm's key: pool, plus the rewrite's label
    decode_tps: float | None  # None: not measured (a non-streamed reply without timings)
    total_ms: float
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class ArmStats:
    """One arm's record for one class (and language, or `*` for all)."""

    arm: str
    n: int
    decode_tps: float  # NaN when no request had a decode rate
    decode_se: float
    total_ms: float
    total_se: float
    completion_tokens: float
    n_tps: int = 0  # requests with a decode rate

    def samples(self, metric: str) -> int:
        return self.n_tps if metric == METRIC_DECODE else self.n

    def value(self, metric: str) -> tuple[float, float]:
        """(mean, standard error) of `metric`, oriented so that smaller is better (unmeasured:
        worst)."""
        mean, se = (-self.decode_tps, self.decode_se) if metric == METRIC_DECODE else (
            self.total_ms, self.total_se)
        return (mean, se) if math.isfinite(mean) else (math.inf, math.inf)


@dataclass(frozen=True, slots=True)
class ArmsState:
    """Per "class/lang" (and "class/*"), the stats of every arm seen there."""

    stats: Mapping[str, Mapping[str, ArmStats]] = field(default_factory=dict)
    n_observations: int = 0

    def for_class(
        self, cls: str, lang: str, arms: Sequence[str], min_samples: int, metric: str = METRIC_TOTAL
    ) -> dict[str, ArmStats]:
        """The language's stats when every arm has `min_samples` there, else the class's."""
        own = self.stats.get(f"{cls}/{lang}", {})
        if arms and all(own.get(a, _EMPTY).samples(metric) >= min_samples for a in arms):
            return {a: own[a] for a in arms}
        pooled = self.stats.get(f"{cls}/{ANY_LANG}", {})
        return {a: pooled[a] for a in arms if a in pooled}


_EMPTY: Final = ArmStats("", 0, math.nan, math.inf, math.nan, math.inf, math.nan)
EMPTY_ARMS: Final = ArmsState()


def arm_observation_from_record(record: RouteRecord) -> ArmObservation | None:
    """From one decision-log record, or None when it taught nothing. Fields are as the reader
    parsed them from a JSON line, so a value of the wrong type also gives None."""
    outcome, classifier = record.outcome, record.classifier
    try:
        arm = str(record.decision.get("arm") or outcome.profile or "")
        tps = float(outcome.decode_tps or outcome.backend_tps or 0.0)
        total = float(outcome.total_ms or 0.0)
        tokens = int(outcome.completion_tokens or 0)
        if outcome.status != 200 or outcome.client_disconnected:
            return None
        if not arm or not classifier.get("class") or tokens < 1 or not total > 0:
            return None
        if not math.isfinite(total):
            return None
        rate = tps if tps > 0 and math.isfinite(tps) else None
        return ArmObservation(
            str(classifier["class"]), str(classifier.get("lang") or "en"), arm, rate, total, tokens
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def arm_observations(records: Iterable[RouteRecord]) -> Iterator[ArmObservation]:
    """What the arms' comparison needs from each record; records that taught nothing are
    dropped."""
    for record in records:
        observation = arm_observation_from_record(record)
        if observation is not None:
            yield observation


def learn_arms(observations: Iterable[ArmObservation]) -> ArmsState:
    groups: dict[str, dict[str, list[ArmObservation]]] = defaultdict(lambda: defaultdict(list))
    n = 0
    for o in observations:
        n += 1
        groups[f"{o.cls}/{o.lang}"][o.arm].append(o)
        groups[f"{o.cls}/{ANY_LANG}"][o.arm].append(o)
    stats = {
        key: {arm: _stats(arm, group) for arm, group in sorted(arms.items())}
        for key, arms in sorted(groups.items())
    }
    return ArmsState(stats, n)


def _stats(arm: str, group: Sequence[ArmObservation]) -> ArmStats:
    rates = [o.decode_tps for o in group if o.decode_tps is not None]
    tps_mean, tps_se = _mean_se(rates)
    total_mean, total_se = _mean_se([o.total_ms for o in group])
    tokens = sum(o.completion_tokens for o in group) / len(group)
    return ArmStats(arm, len(group), tps_mean, tps_se, total_mean, total_se, tokens, len(rates))


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    if n == 0:
        return math.nan, math.inf
    mean = sum(values) / n
    if n < 2:
        return mean, math.inf
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


# --- comparing and choosing --------------------------------------------------------------------


def metric_for(arms: Sequence[Arm]) -> str:
    """Decode rate when the arms' answers are alike in length (the same model, thinking mode and
    cap; a temperature may differ), else the total time to the answer."""
    shapes = {arm.rewrite.length_label() if arm.rewrite is not None else "" for arm in arms}
    return METRIC_DECODE if len(shapes) == 1 else METRIC_TOTAL


@dataclass(frozen=True, slots=True)
class ArmChoice:
    arm: Arm
    explored: bool  # sent against the evidence (or to an arm with too few samples)
    probability: float  # the chance of exploring this request had
    trusted: bool  # every arm had min_samples: the evidence chose
    metric: str
    draw_left: float | None  # a fresh uniform draw for the next decision (None: none given)


def choose_arm(
    arms: Sequence[Arm],
    state: ArmsState,
    cls: str,
    lang: str,
    *,
    min_samples: int,
    rate: float,
    draw: float | None,
) -> ArmChoice:
    """The arm for one request: the best measured when every arm has `min_samples` requests of
    the class, else the route's first; maybe another of the route's arms, to explore."""
    if not arms:
        raise ValueError("a route needs at least one arm")
    metric = metric_for(arms)
    if len(arms) == 1:
        return ArmChoice(arms[0], False, 0.0, False, metric, draw)
    stats = state.for_class(cls, lang, [a.key for a in arms], min_samples, metric)
    counts = {a.key: stats[a.key].samples(metric) if a.key in stats else 0 for a in arms}
    cold = [a for a in arms if counts[a.key] < min_samples]
    ranked = rank_arms(arms, stats, metric) if not cold else list(arms)
    best, others = ranked[0], ranked[1:]
    probability, target = _exploration(best, others, cold, stats, metric, rate)
    if draw is None:
        return ArmChoice(best, False, probability, not cold, metric, None)
    if draw < probability and target is not None:
        return ArmChoice(target, True, probability, not cold, metric, draw / probability)
    left = (draw - probability) / (1.0 - probability) if probability < 1 else 0.0
    return ArmChoice(best, False, probability, not cold, metric, left)


def rank_arms(arms: Sequence[Arm], stats: Mapping[str, ArmStats], metric: str) -> list[Arm]:
    """Arms best first by `metric` (arms without stats last, in the route's order)."""
    def key(item: tuple[int, Arm]) -> tuple[float, int]:
        index, arm = item
        s = stats.get(arm.key)
        return (s.value(metric)[0] if s is not None else math.inf, index)

    return [arm for _, arm in sorted(enumerate(arms), key=key)]


def _exploration(
    best: Arm,
    others: Sequence[Arm],
    cold: Sequence[Arm],
    stats: Mapping[str, ArmStats],
    metric: str,
    rate: float,
) -> tuple[float, Arm | None]:
    """The chance of sending this request elsewhere, and where: a cold arm, else the runner-up."""
    if rate <= 0 or not others:
        return 0.0, None
    cold_others = [a for a in cold if a.key != best.key]
    if cold_others:
        least = min(cold_others, key=lambda a: stats[a.key].samples(metric) if a.key in stats else 0)
        return max(rate, COLD_START_SHARE), least
    runner = others[0]
    if cold:  # only the default arm is short of samples: it gets them; the rest, the budget
        return rate, runner
    chance = contrary_chance(stats[best.key], stats[runner.key], metric)
    if chance < CONCLUSIVE:
        return 0.0, runner
    return rate * min(1.0, 2.0 * chance), runner


def contrary_chance(best: ArmStats, runner: ArmStats, metric: str) -> float:
    """The chance that the runner-up is in fact better (normal approximation)."""
    (b, b_se), (r, r_se) = best.value(metric), runner.value(metric)
    se = math.hypot(b_se, r_se)
    if not math.isfinite(se):
        return 0.5
    if se <= 0:
        return 0.0
    return 1.0 - normal_cdf((r - b) / se)


# --- JSON --------------------------------------------------------------------------------------


class ArmsStateError(ValueError):
    pass


def arms_to_json(state: ArmsState) -> str:
    """Strict JSON (an infinite standard error is written as null)."""
    def clean(stats: ArmStats) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in asdict(stats).items()}

    data = {
        "n_observations": state.n_observations,
        "stats": {key: {arm: clean(s) for arm, s in arms.items()} for key, arms in state.stats.items()},
    }
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False)


def arms_from_json(text: str) -> ArmsState:
    try:
        data = json.loads(text)
        stats = {
            key: {arm: _stats_from(s) for arm, s in arms.items()}
            for key, arms in data["stats"].items()
        }
        return ArmsState(stats, int(data.get("n_observations", 0)))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ArmsStateError(f"not an arms state: {exc}") from exc


def _stats_from(s: Mapping[str, Any]) -> ArmStats:
    def number(name: str, missing: float) -> float:
        value = s.get(name)
        return missing if value is None else float(value)

    return ArmStats(
        arm=str(s["arm"]),
        n=int(s["n"]),
        decode_tps=number("decode_tps", math.nan),
        decode_se=number("decode_se", math.inf),
        total_ms=number("total_ms", math.nan),
        total_se=number("total_se", math.inf),
        completion_tokens=number("completion_tokens", math.nan),
        n_tps=int(s.get("n_tps") or 0),
    )

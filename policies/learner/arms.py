"""The arms' learned state: for each route's arm (pool plus rewrite) and class, what its
requests took, as sums that add (count, sum and sum of squares of the decode rate and of the
total time), so that the log's pass, the online path and several replicas combine the same way.

Pure: observations in, an `ArmsState` out, and its JSON; no I/O, no clock, no globals.
`policies.decision.arm_choice` chooses an arm from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from policies.learner.observation import Observation
from policies.learner.speedup import ScalarEvidence
from policies.policyfile.words import ANY_LANG

METRIC_DECODE: Final = "decode_tps"
METRIC_TOTAL: Final = "total_ms"
_NONE: Final = ScalarEvidence()


@dataclass(frozen=True, slots=True)
class ArmStats:
    """One arm's requests for one class (and language, or `*` for all), as sums."""

    arm: str
    decode: ScalarEvidence = _NONE  # tokens/s of the requests with a decode rate
    total: ScalarEvidence = _NONE  # ms to the whole answer
    tokens: float = 0.0  # completion tokens, summed

    @property
    def n(self) -> int:
        return self.total.n

    @property
    def n_tps(self) -> int:
        """Requests with a decode rate."""
        return self.decode.n

    @property
    def decode_tps(self) -> float:
        return self.decode.mean  # NaN when no request had a decode rate

    @property
    def decode_se(self) -> float:
        return _se(self.decode)

    @property
    def total_ms(self) -> float:
        return self.total.mean

    @property
    def total_se(self) -> float:
        return _se(self.total)

    @property
    def completion_tokens(self) -> float:
        return self.tokens / self.n if self.n else math.nan

    def merged(self, other: ArmStats) -> ArmStats:
        return ArmStats(self.arm, self.decode.merged(other.decode),
                        self.total.merged(other.total), self.tokens + other.tokens)

    def samples(self, metric: str) -> int:
        return self.n_tps if metric == METRIC_DECODE else self.n

    def value(self, metric: str) -> tuple[float, float]:
        """(mean, standard error) of `metric`, oriented so that smaller is better (unmeasured:
        worst)."""
        mean, se = (-self.decode_tps, self.decode_se) if metric == METRIC_DECODE else (
            self.total_ms, self.total_se)
        return (mean, se) if math.isfinite(mean) else (math.inf, math.inf)


def _se(data: ScalarEvidence) -> float:
    sd = data.sd()
    return sd / math.sqrt(data.n) if math.isfinite(sd) else math.inf


@dataclass(frozen=True, slots=True)
class ArmsState:
    """Per "class/lang" (and "class/*"), the sums of every arm seen there."""

    stats: Mapping[str, Mapping[str, ArmStats]] = field(default_factory=dict)
    n_observations: int = 0

    def for_class(
        self, cls: str, lang: str, arms: Sequence[str], min_samples: int, metric: str = METRIC_TOTAL
    ) -> dict[str, ArmStats]:
        """The language's stats when every arm has `min_samples` there, else the class's."""
        return self.for_variants(cls, lang, [(a,) for a in arms], min_samples, metric)

    def for_variants(
        self, cls: str, lang: str, variants: Sequence[Sequence[str]], min_samples: int,
        metric: str = METRIC_TOTAL,
    ) -> dict[str, ArmStats]:
        """Each variant's stats, its arms' sums added under its first arm's key (a variant: the
        arms that send one request to different pools): the language's when every variant has
        `min_samples` there, else the class's."""
        own = _summed(self.stats.get(f"{cls}/{lang}", {}), variants)
        if variants and len(own) == len(variants) and all(
                s.samples(metric) >= min_samples for s in own.values()):
            return own
        return _summed(self.stats.get(f"{cls}/{ANY_LANG}", {}), variants)

    def merged(self, other: ArmsState) -> ArmsState:
        stats = {key: dict(arms) for key, arms in self.stats.items()}
        for key, arms in other.stats.items():
            table = stats.setdefault(key, {})
            for arm, s in arms.items():
                table[arm] = table[arm].merged(s) if arm in table else s
        return ArmsState(_sorted(stats), self.n_observations + other.n_observations)


def _summed(table: Mapping[str, ArmStats], variants: Sequence[Sequence[str]]) -> dict[str, ArmStats]:
    """Per variant with any stats in `table`: its arms' stats added, under its first arm's key."""
    summed: dict[str, ArmStats] = {}
    for keys in variants:
        found = [table[k] for k in keys if k in table]
        if not found:
            continue
        total = ArmStats(keys[0])
        for s in found:
            total = total.merged(s)
        summed[keys[0]] = total
    return summed


EMPTY_ARMS: Final = ArmsState()


def learn_arms(observations: Iterable[Observation]) -> ArmsState:
    """The sums of every timed observation, per class and language and per class (summed as
    plain numbers first, one `ArmStats` per arm at the end: the online path runs this for
    every batch of records)."""
    sums: dict[tuple[str, str], list[float]] = {}
    n = 0
    for o in observations:
        if not o.timed:
            continue
        n += 1
        rate, total = o.arm_tps, o.total_ms or 0.0
        for key in (f"{o.cls}/{o.lang}", f"{o.cls}/{ANY_LANG}"):
            acc = sums.get((key, o.arm))
            if acc is None:
                acc = sums[(key, o.arm)] = [0.0] * 7
            if rate is not None:
                acc[0] += 1
                acc[1] += rate
                acc[2] += rate * rate
            acc[3] += 1
            acc[4] += total
            acc[5] += total * total
            acc[6] += o.completion_tokens
    stats: dict[str, dict[str, ArmStats]] = {}
    for (key, arm), acc in sums.items():
        stats.setdefault(key, {})[arm] = ArmStats(
            arm, ScalarEvidence(int(acc[0]), acc[1], acc[2]),
            ScalarEvidence(int(acc[3]), acc[4], acc[5]), acc[6])
    return ArmsState(_sorted(stats), n)


def _sorted(stats: Mapping[str, Mapping[str, ArmStats]]) -> dict[str, dict[str, ArmStats]]:
    return {key: dict(sorted(arms.items())) for key, arms in sorted(stats.items())}


# --- JSON (inside the learned state's file) -----------------------------------------------------


def arms_as_json(state: ArmsState) -> dict[str, Any]:
    def sums(s: ArmStats) -> dict[str, Any]:
        return {"decode": _triple(s.decode), "total": _triple(s.total), "tokens": s.tokens}

    return {"n_observations": state.n_observations,
            "stats": {key: {arm: sums(s) for arm, s in arms.items()}
                      for key, arms in state.stats.items()}}


def arms_from_json(data: Mapping[str, Any]) -> ArmsState:
    """Raises KeyError, TypeError or ValueError on a malformed state (the caller says which)."""
    stats = {
        str(key): {str(arm): ArmStats(str(arm), _scalar(s["decode"]), _scalar(s["total"]),
                                      float(s["tokens"]))
                   for arm, s in dict(arms).items()}
        for key, arms in dict(data["stats"]).items()
    }
    return ArmsState(stats, int(data["n_observations"]))


def _triple(data: ScalarEvidence) -> list[float]:
    return [data.n, data.total, data.squares]


def _scalar(raw: Any) -> ScalarEvidence:
    n, total, squares = raw
    return ScalarEvidence(int(n), float(total), float(squares))

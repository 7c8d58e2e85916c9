"""What the router predicts per request and instance, learned from the decision log over a
machine prior: the plain pace, the speedup of an mtp instance for this request, the prefill
rate, and how many tokens the request will produce. Every term has an uncertainty.

Pure: observations in, sufficient statistics (`RouteEvidence`, additive, JSON-able) out; a
`RouteModel` combines them with a `MachinePrior`. No I/O, no clock.

Every served request is stored as log(ms per token) on the instance that served it; the pace
and the speedup are estimated jointly from both kinds of instance (`policies.learner.speedup`), so the
speedup is one instance measured against the other, and the prior's pace is only where the
model starts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from policies.learner.observation import Observation
from policies.learner.speedup import (
    Evidence,
    Posterior,
    Prediction,
    PriorTerms,
    ScalarEvidence,
    Vector,
)
from policies.policyfile.machine import MachinePrior
from policies.policyfile.schema import Assume

# A request's prefill rate is learned only from prompts at least this long (short prompts are
# dominated by fixed per-request costs).
MIN_PREFILL_TOKENS: Final = 32
# Completion lengths borrow this many pseudo-requests from the machine prior.
COMPLETION_PRIOR_WEIGHT: Final = 3.0
# No observations (immutable: one shared instance, not a new one per lookup on every decision).
_NO_DATA: Final = ScalarEvidence()


@dataclass(frozen=True, slots=True)
class RouteEvidence:
    """Everything learned from the log, as sums (merge two by adding)."""

    greedy: Evidence = field(default_factory=Evidence.empty)  # y = log(mtp ms/token)
    sampled: ScalarEvidence = field(default_factory=ScalarEvidence)  # log(mtp ms/token), sampled or thinking
    plain: ScalarEvidence = field(default_factory=ScalarEvidence)  # log(ms/token) on plain instances
    probes: Mapping[str, int] = field(default_factory=dict)  # profile -> startup probes among them
    prefill: Mapping[str, ScalarEvidence] = field(default_factory=dict)  # profile -> ms/token
    completion: Mapping[str, ScalarEvidence] = field(default_factory=dict)  # class -> tokens
    through: str = ""  # timestamp of the newest record included

    def merged(self, other: RouteEvidence) -> RouteEvidence:
        return RouteEvidence(
            greedy=self.greedy.merged(other.greedy),
            sampled=self.sampled.merged(other.sampled),
            plain=self.plain.merged(other.plain),
            probes={k: self.probes.get(k, 0) + other.probes.get(k, 0)
                    for k in sorted({*self.probes, *other.probes})},
            prefill=_merge(self.prefill, other.prefill),
            completion=_merge(self.completion, other.completion),
            through=max(self.through, other.through),
        )

    @property
    def n_mtp(self) -> int:
        return self.greedy.n + self.sampled.n

    def as_json(self) -> dict[str, Any]:
        def scalars(table: Mapping[str, ScalarEvidence]) -> dict[str, list[float]]:
            return {k: [v.n, v.total, v.squares] for k, v in sorted(table.items())}

        return {
            "greedy": self.greedy.as_json(),
            "sampled": [self.sampled.n, self.sampled.total, self.sampled.squares],
            "plain": [self.plain.n, self.plain.total, self.plain.squares],
            "probes": dict(sorted(self.probes.items())),
            "prefill": scalars(self.prefill),
            "completion": scalars(self.completion),
            "through": self.through,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RouteEvidence:
        def scalar(raw: Any) -> ScalarEvidence:
            n, total, squares = raw
            return ScalarEvidence(int(n), float(total), float(squares))

        return cls(
            greedy=Evidence.from_json(data["greedy"]),
            sampled=scalar(data["sampled"]),
            plain=scalar(data["plain"]),
            probes={str(k): int(v) for k, v in dict(data.get("probes", {})).items()},
            prefill={str(k): scalar(v) for k, v in dict(data["prefill"]).items()},
            completion={str(k): scalar(v) for k, v in dict(data["completion"]).items()},
            through=str(data.get("through", "")),
        )


def _merge(
    a: Mapping[str, ScalarEvidence], b: Mapping[str, ScalarEvidence]
) -> dict[str, ScalarEvidence]:
    out = dict(a)
    for key, value in b.items():
        out[key] = out[key].merged(value) if key in out else value
    return out


def gather(observations: Iterable[Observation], assume: Assume) -> RouteEvidence:
    """The evidence in a batch of observations (what `specroute learn` stores)."""
    evidence = RouteEvidence()
    rows: list[tuple[Vector, float]] = []
    for o in observations:
        if not o.paced:
            continue
        if o.profile == "mtp" and o.greedy(assume) and o.inputs is not None:
            rows.append((np.array(o.inputs, dtype=np.float64), math.log(o.ms_per_token)))
            evidence = replace(evidence, **_others(evidence, o))
        else:
            evidence = add_scalars(evidence, o, assume)
    return replace(evidence, greedy=evidence.greedy.merged(Evidence.of(rows)))


def observe(evidence: RouteEvidence, o: Observation, assume: Assume) -> RouteEvidence:
    """The evidence with one more observation (what the proxy does as records arrive)."""
    if not o.paced:
        return evidence
    if o.profile == "mtp" and o.greedy(assume) and o.inputs is not None:
        x = np.array(o.inputs, dtype=np.float64)
        evidence = replace(evidence, greedy=evidence.greedy.plus(x, math.log(o.ms_per_token)))
        return replace(evidence, **_others(evidence, o))
    return add_scalars(evidence, o, assume)


def add_scalars(evidence: RouteEvidence, o: Observation, assume: Assume) -> RouteEvidence:
    changes = _others(evidence, o)
    if o.profile == "plain":
        changes["plain"] = evidence.plain.plus(math.log(o.ms_per_token))
    elif not o.greedy(assume):
        changes["sampled"] = evidence.sampled.plus(math.log(o.ms_per_token))
    return replace(evidence, **changes)


def _others(evidence: RouteEvidence, o: Observation) -> dict[str, Any]:
    """Prefill rate (only when nothing was queued ahead) and completion length."""
    changes: dict[str, Any] = {"through": max(evidence.through, o.ts)}
    if o.probe:
        changes["probes"] = {**evidence.probes, o.profile: evidence.probes.get(o.profile, 0) + 1}
    completion = dict(evidence.completion)
    completion[o.cls] = completion.get(o.cls, _NO_DATA).plus(float(o.completion_tokens))
    changes["completion"] = completion
    uncached = o.prompt_tokens - o.cached_tokens
    if o.ttft_ms is not None and not o.queued and uncached >= MIN_PREFILL_TOKENS:
        prefill = dict(evidence.prefill)
        prefill[o.profile] = prefill.get(o.profile, _NO_DATA).plus(o.ttft_ms / uncached)
        changes["prefill"] = prefill
    return changes


class RouteModel:
    """Predictions for one request on each kind of instance: a prior and evidence combined."""

    def __init__(
        self, prior: MachinePrior, evidence: RouteEvidence, terms: PriorTerms | None = None
    ) -> None:
        """`terms`: `PriorTerms.of(prior)`, when the caller keeps it (it rebuilds the model
        with every record)."""
        self.prior, self.evidence = prior, evidence
        terms = terms if terms is not None else PriorTerms.of(prior)
        self.posterior = Posterior(terms, evidence.greedy, evidence.plain, evidence.sampled)
        self.pace = self.posterior.pace(evidence.plain.n)
        self.t_plain_ms = self.pace.speedup  # exp(log pace): the median ms per token

    def speedup(self, x: Vector) -> Prediction:
        """log-speedup of an mtp instance over plain for a greedy request, with its
        uncertainty (`sampled_speedup` for the others)."""
        return self.posterior.predict(x)

    def sampled_speedup(self) -> Prediction:
        """log-speedup of sampled or thinking requests: one figure, whatever the request."""
        return self.posterior.sampled(self.evidence.sampled.n)

    def measured(self, profile: str) -> int:
        """Served requests of `profile` learned from (startup probes included)."""
        return self.evidence.plain.n if profile == "plain" else self.evidence.n_mtp

    def pace_source(self, profile: str) -> str:
        """Where the pace on instances of `profile` comes from: prior, probe or log."""
        n = self.measured(profile)
        probes = self.evidence.probes.get(profile, 0)
        if n == 0:
            return "prior"
        return "probe" if n == probes else "log"

    def prefill_ms_per_token(self, profile: str) -> float:
        data = self.evidence.prefill.get(profile, _NO_DATA)
        if data.n == 0:
            return self.prior.prefill_ms_per_token
        k = COMPLETION_PRIOR_WEIGHT
        return (data.total + k * self.prior.prefill_ms_per_token) / (data.n + k)

    def completion_tokens(self, cls: str, max_tokens: int) -> float:
        """Expected completion tokens: the class's mean over the log (shrunk toward the prior),
        capped by the request's max_tokens."""
        data = self.evidence.completion.get(cls, _NO_DATA)
        k = COMPLETION_PRIOR_WEIGHT
        mean = (data.total + k * self.prior.completion_tokens) / (data.n + k)
        return float(min(mean, max_tokens)) if max_tokens > 0 else mean

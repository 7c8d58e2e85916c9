"""What the router predicts per request and instance, learned from the decision log over a
machine prior: the plain pace, the speedup of an mtp instance for this request, the prefill
rate, and how many tokens the request will produce (`policies.learner.length`). Every term
has an uncertainty.

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
from typing import Any, Final, Protocol, Self, TypeVar

import numpy as np

from policies.learner.batch import NO_BATCH, PRIOR_CURVE, BatchCurve, BatchEvidence
from policies.learner.length import LengthModel
from policies.learner.observation import Observation
from policies.learner.speedup import (
    MTP_CONFIG,
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
# The prior's prefill rate is worth this many prompt tokens: three of the shortest prompts
# learned from.
PREFILL_PRIOR_TOKENS: Final = 3 * MIN_PREFILL_TOKENS
# Completion lengths borrow this many pseudo-requests from the machine prior.
COMPLETION_PRIOR_WEIGHT: Final = 3.0
# No observations (immutable: one shared instance, not a new one per lookup on every decision).
_NO_DATA: Final = ScalarEvidence()
_NO_ROWS: Final = Evidence.empty()


PLAIN_CONFIG: Final = "plain"  # the config key of instances that do not speculate


@dataclass(frozen=True, slots=True)
class RouteEvidence:
    """Everything learned from the log, as sums (merge two by adding). Per speculation config
    (its key: `mtp`, `ngram-simple`, `draft`, ...), the greedy requests' regression sums and
    the sampled ones'; on plain instances one scalar."""

    greedy: Mapping[str, Evidence] = field(default_factory=dict)  # config -> y = log(ms/token)
    sampled: Mapping[str, ScalarEvidence] = field(default_factory=dict)  # sampled or thinking
    plain: ScalarEvidence = field(default_factory=ScalarEvidence)  # log(ms/token) on plain instances
    probes: Mapping[str, int] = field(default_factory=dict)  # config -> startup probes among them
    # config -> ms/token of prefill, each prompt weighted by its uncached tokens (n: tokens)
    prefill: Mapping[str, ScalarEvidence] = field(default_factory=dict)
    completion: Mapping[str, ScalarEvidence] = field(default_factory=dict)  # class -> tokens
    # class -> y = log(completion tokens) over the request's inputs, every served request but
    # the probes' (one regression over them all; per class, its residual spread)
    length: Mapping[str, Evidence] = field(default_factory=dict)
    # instance -> its per-token time against its batch (`policies.learner.batch`)
    batch: Mapping[str, BatchEvidence] = field(default_factory=dict)
    through: str = ""  # timestamp of the newest record included

    def merged(self, other: RouteEvidence) -> RouteEvidence:
        return RouteEvidence(
            greedy=_merge(self.greedy, other.greedy),
            sampled=_merge(self.sampled, other.sampled),
            plain=self.plain.merged(other.plain),
            probes={k: self.probes.get(k, 0) + other.probes.get(k, 0)
                    for k in sorted({*self.probes, *other.probes})},
            prefill=_merge(self.prefill, other.prefill),
            completion=_merge(self.completion, other.completion),
            length=_merge(self.length, other.length),
            batch=_merge(self.batch, other.batch),
            through=max(self.through, other.through),
        )

    def greedy_of(self, config: str) -> Evidence:
        """The greedy regression sums of `config`'s instances (empty when never measured)."""
        return self.greedy.get(config, _NO_ROWS)

    def sampled_of(self, config: str) -> ScalarEvidence:
        return self.sampled.get(config, _NO_DATA)

    def n_config(self, config: str) -> int:
        """Requests measured on `config`'s instances (greedy and sampled)."""
        if config == PLAIN_CONFIG:
            return self.plain.n
        return self.greedy.get(config, _NO_ROWS).n + self.sampled.get(config, _NO_DATA).n

    @property
    def n_speculating(self) -> int:
        """Requests measured on instances that speculate, whatever their config."""
        return sum(e.n for e in self.greedy.values()) + sum(e.n for e in self.sampled.values())

    @property
    def configs(self) -> tuple[str, ...]:
        """The speculation configs measured, plain excluded."""
        return tuple(sorted({*self.greedy, *self.sampled}))

    def as_json(self) -> dict[str, Any]:
        def scalars(table: Mapping[str, ScalarEvidence]) -> dict[str, list[float]]:
            return {k: [v.n, v.total, v.squares] for k, v in sorted(table.items())}

        return {
            "greedy": {k: v.as_json() for k, v in sorted(self.greedy.items())},
            "sampled": scalars(self.sampled),
            "plain": [self.plain.n, self.plain.total, self.plain.squares],
            "probes": dict(sorted(self.probes.items())),
            "prefill_by_token": scalars(self.prefill),
            "completion": scalars(self.completion),
            "length": {k: v.as_json() for k, v in sorted(self.length.items())},
            "batch": {k: v.as_json() for k, v in sorted(self.batch.items())},
            "through": self.through,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RouteEvidence:
        def scalar(raw: Any) -> ScalarEvidence:
            n, total, squares = raw
            return ScalarEvidence(int(n), float(total), float(squares))

        greedy, sampled = data["greedy"], data["sampled"]
        if "inputs" in greedy:  # written when depth-1 speculation was the only config
            greedy, sampled = {MTP_CONFIG: greedy}, {MTP_CONFIG: sampled}
        return cls(
            greedy={str(k): Evidence.from_json(v) for k, v in dict(greedy).items()},
            sampled={str(k): scalar(v) for k, v in dict(sampled).items()},
            plain=scalar(data["plain"]),
            probes={str(k): int(v) for k, v in dict(data.get("probes", {})).items()},
            # sums written when each prompt weighed one (`prefill`): none learned yet
            prefill={str(k): scalar(v)
                     for k, v in dict(data.get("prefill_by_token", {})).items()},
            completion={str(k): scalar(v) for k, v in dict(data["completion"]).items()},
            # sums written before lengths were learned per request: none learned yet
            length={str(k): Evidence.from_json(v) for k, v in dict(data.get("length", {})).items()},
            # sums written before batches were learned: none learned yet
            batch={str(k): BatchEvidence.from_json(v)
                   for k, v in dict(data.get("batch", {})).items()},
            through=str(data.get("through", "")),
        )


class _Sums(Protocol):
    def merged(self, other: Self) -> Self: ...


_S = TypeVar("_S", bound=_Sums)


def _merge(a: Mapping[str, _S], b: Mapping[str, _S]) -> dict[str, _S]:
    out = dict(a)
    for key, value in b.items():
        out[key] = out[key].merged(value) if key in out else value
    return out


def gather(observations: Iterable[Observation], assume: Assume) -> RouteEvidence:
    """The evidence in a batch of observations (what `specroute learn` stores)."""
    evidence = RouteEvidence()
    rows: dict[str, list[tuple[Vector, float]]] = {}
    lengths: dict[str, list[tuple[Vector, float]]] = {}
    batch: dict[str, BatchEvidence] = {}
    for o in observations:
        if not o.paced:
            continue
        x = _inputs(o)
        greedy_row = x is not None and _regression_row(o, assume)
        if greedy_row:
            assert x is not None
            rows.setdefault(o.config, []).append((x, math.log(o.ms_per_token)))
            evidence = replace(evidence, **_others(evidence, o))
        else:
            evidence = add_scalars(evidence, o, assume)
        if o.in_batch:
            batch[o.backend] = _batch_row(batch.get(o.backend, NO_BATCH), o, x if greedy_row
                                          else None, assume)
        if x is not None and _length_row(o):
            lengths.setdefault(o.cls, []).append((x, math.log(o.completion_tokens)))
    by_config = {config: Evidence.of(config_rows) for config, config_rows in rows.items()}
    return replace(evidence, greedy=_merge(evidence.greedy, by_config), batch=batch,
                   length={cls: Evidence.of(rows) for cls, rows in lengths.items()})


def observe(evidence: RouteEvidence, o: Observation, assume: Assume) -> RouteEvidence:
    """The evidence with one more observation (what the proxy does as records arrive)."""
    if not o.paced:
        return evidence
    x = _inputs(o)
    greedy_row = x is not None and _regression_row(o, assume)
    if o.in_batch:
        sums = _batch_row(evidence.batch.get(o.backend, NO_BATCH), o,
                          x if greedy_row else None, assume)
        evidence = replace(evidence, batch={**evidence.batch, o.backend: sums})
    if x is not None and _length_row(o):
        before = evidence.length.get(o.cls, _NO_ROWS)
        length = {**evidence.length, o.cls: before.plus(x, math.log(o.completion_tokens))}
        evidence = replace(evidence, length=length)
    if greedy_row:
        assert x is not None
        before = evidence.greedy.get(o.config, _NO_ROWS)
        greedy = {**evidence.greedy, o.config: before.plus(x, math.log(o.ms_per_token))}
        return replace(evidence, greedy=greedy, **_others(evidence, o))
    return add_scalars(evidence, o, assume)


def _batch_row(sums: BatchEvidence, o: Observation, x: Vector | None,
               assume: Assume) -> BatchEvidence:
    """`o`, served in a batch above 1, into its instance's slope sums: a greedy row on a
    speculating instance with its inputs, a sampled one as such, a plain one's alone."""
    sampled = o.config != PLAIN_CONFIG and x is None and not o.greedy(assume)
    return sums.plus(o.batch, math.log(o.ms_per_token), o.config,
                     None if x is None else x.tolist(), sampled, o.batch_start)


def _inputs(o: Observation) -> Vector | None:
    return None if o.inputs is None else np.array(o.inputs, dtype=np.float64)


def _length_row(o: Observation) -> bool:
    """A row of the length regression: a client's request (a startup probe's length is the
    probe's own max_tokens, not what such requests produce)."""
    return not o.probe


def _regression_row(o: Observation, assume: Assume) -> bool:
    """A greedy request on a speculating instance (with its inputs): a row of its config's
    regression."""
    return o.config != PLAIN_CONFIG and o.greedy(assume)


def add_scalars(evidence: RouteEvidence, o: Observation, assume: Assume) -> RouteEvidence:
    changes = _others(evidence, o)
    if o.config == PLAIN_CONFIG:
        changes["plain"] = evidence.plain.plus(math.log(o.ms_per_token))
    elif not o.greedy(assume):
        before = evidence.sampled.get(o.config, _NO_DATA)
        changes["sampled"] = {**evidence.sampled,
                              o.config: before.plus(math.log(o.ms_per_token))}
    return replace(evidence, **changes)


def _others(evidence: RouteEvidence, o: Observation) -> dict[str, Any]:
    """Prefill rate (only when nothing was queued ahead) and completion length."""
    changes: dict[str, Any] = {"through": max(evidence.through, o.ts)}
    if o.probe:
        changes["probes"] = {**evidence.probes, o.config: evidence.probes.get(o.config, 0) + 1}
    completion = dict(evidence.completion)
    completion[o.cls] = completion.get(o.cls, _NO_DATA).plus(float(o.completion_tokens))
    changes["completion"] = completion
    uncached = o.prompt_tokens - o.cached_tokens
    if o.ttft_ms is not None and not o.queued and uncached >= MIN_PREFILL_TOKENS:
        prefill = dict(evidence.prefill)
        # weighted by its tokens: the sums give the time over the tokens of every prompt, as
        # the report's (a short prompt's first token is mostly fixed costs and the wait for
        # its neighbours' prompts in a batch: one per-token figure each, they priced a long
        # prompt's prefill at 3-4x what it took)
        prefill[o.config] = prefill.get(o.config, _NO_DATA).plus(o.ttft_ms / uncached, uncached)
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
        self.posterior = Posterior(terms, evidence.greedy, evidence.plain, evidence.sampled,
                                   evidence.batch)
        self.pace = self.posterior.pace(evidence.plain.n)
        self.t_plain_ms = self.pace.speedup  # exp(log pace): the median ms per token
        self.typical_tokens = _typical_tokens(prior, evidence)
        self.length = LengthModel(prior.completion_tokens, evidence.length)
        self._curves: dict[str, BatchCurve] = {}

    def speedup(self, x: Vector, config: str = MTP_CONFIG) -> Prediction:
        """log-speedup of an instance of `config` over plain for a greedy request, with its
        uncertainty (`sampled_speedup` for the others)."""
        return self.posterior.predict(x, config)

    def speedups(self, x: Vector, configs: tuple[str, ...]) -> list[Prediction]:
        """`speedup` of each of `configs` for one greedy request."""
        return self.posterior.predict_many(x, configs)

    def sampled_speedup(self, config: str = MTP_CONFIG) -> Prediction:
        """log-speedup of sampled or thinking requests on `config`: one figure, whatever the
        request."""
        return self.posterior.sampled(self.evidence.sampled.get(config, _NO_DATA).n, config)

    def batch_curve(self, instance: str) -> BatchCurve:
        """`instance`'s per-token time against the batch it decodes in."""
        curve = self._curves.get(instance)
        if curve is None:
            slope = self.posterior.batch_slope(instance)
            sums = self.evidence.batch.get(instance, NO_BATCH)
            curve = (PRIOR_CURVE if slope is None
                     else BatchCurve(*slope, sums.n, True, *sums.drift()))
            self._curves[instance] = curve
        return curve

    def measured(self, config: str) -> int:
        """Served requests on instances of `config` learned from (startup probes included)."""
        return self.evidence.n_config(config)

    def pace_source(self, config: str) -> str:
        """Where the pace on instances of `config` comes from: prior, probe or log."""
        n = self.measured(config)
        probes = self.evidence.probes.get(config, 0)
        if n == 0:
            return "prior"
        return "probe" if n == probes else "log"

    def prefill_ms_per_token(self, config: str) -> float:
        data = self.evidence.prefill.get(config, _NO_DATA)
        if data.n == 0:
            return self.prior.prefill_ms_per_token
        return _shrunk(data.total, data.n, self.prior.prefill_ms_per_token,
                       PREFILL_PRIOR_TOKENS)

    def completion_tokens(self, x: Vector, max_tokens: int) -> float:
        """Expected completion tokens of a request with inputs `x`, capped by its max_tokens
        (0: none): the length regression's (`policies.learner.length`)."""
        return self.length.expected(x, max_tokens)

    def completion_spread(self, x: Vector) -> float:
        """The sd of the log of that request's completion length (`LengthModel.spread`)."""
        return self.length.spread(x)


def _typical_tokens(prior: MachinePrior, evidence: RouteEvidence) -> float:
    """Completion tokens of a typical request: the mean over every class in the log, shrunk
    toward the prior's as each class's own mean is (what a request's exploration is weighed
    against, `policies.decision.finish.exploration_bound`)."""
    logged = evidence.completion.values()
    return _shrunk(math.fsum(d.total for d in logged), sum(d.n for d in logged),
                   prior.completion_tokens)


def _shrunk(total: float, n: float, prior: float,
            weight: float = COMPLETION_PRIOR_WEIGHT) -> float:
    """The mean of `n` logged values (or weights) summing to `total`, with the prior's value
    worth `weight` of them."""
    return (total + weight * prior) / (n + weight)

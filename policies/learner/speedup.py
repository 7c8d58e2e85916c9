"""The per-request speedup of MTP-1 over plain decoding: a contextual bandit over the request's
logged features and the classifier's scores.

Pure: numpy arithmetic on data passed in; no I/O, no clock, no globals.

The model is a Bayesian linear regression of log(ms per token) on every served request, plain
and mtp alike (Gaussian prior from the machine profile, known noise), over joint parameters:
the plain pace, and the log-speedup weights over `INPUTS`. The prior puts each class's
log-speedup on the classifier's probability of that class, so a cold start routes by the
machine's figures; every served request adds one observation, so that structure the
classifier misreads (tools attached with tool calls in the history read as chat, say) is
corrected by the outcomes over the features themselves, and the speedup is measured as one
instance against the other, never against the prior's pace. `Evidence` holds only sufficient
statistics (additive: the learner sums the log, the proxy adds each record as it arrives);
`Posterior` combines them with a prior. Thompson sampling draws the request's log-speedup from
its posterior marginal, one normal draw.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from classifiers.scores import CLASSES
from policies.policyfile.machine import MachinePrior

Vector = npt.NDArray[np.float64]

CLASS_INPUTS: Final = tuple(f"p_{c}" for c in CLASSES)
INPUTS: Final = (
    "bias", *CLASS_INPUTS,
    "tools",  # tools attached
    "tool_history",  # tool calls or results earlier in the conversation
    "agent_structure",  # both: unambiguously an agent turn
    "last_tool",  # the last message is a tool result
    "code_fences",  # fenced blocks, capped at 3, scaled to [0, 1]
    "code_lines",  # share of code-like lines
    "cjk",  # share of CJK characters
    "json_mode",
    "log_prompt",  # log(1 + prompt tokens) / 10
    "turns",  # messages, capped at 20, scaled to [0, 1]
)
# Prior spread of a weight that is not a class's or the machine-wide shift's.
FEATURE_SD: Final = 0.05


def inputs(features: Mapping[str, Any], scores: Mapping[str, float] | None) -> Vector:
    """The model's input for one request, from the features and class scores as logged."""
    # Runs on every routing decision and every record the online model learns from: plain
    # lookups, no closures or intermediate dicts.
    get = features.get
    probabilities = scores or {}
    raw = [probabilities.get(c, 0.0) for c in CLASSES]
    total = sum(raw)
    share = [p / total for p in raw] if total > 0 else [1.0 / len(CLASSES)] * len(CLASSES)
    tools = _num(get("n_tools", 0)) > 0
    last_tool = bool(get("last_role_tool"))
    history = bool(get("history_has_tool")) or last_tool
    values = [
        1.0, *share,
        float(tools),
        float(history),
        float(tools and history),
        float(last_tool),
        min(_num(get("code_fences", 0)), 3.0) / 3.0,
        min(max(_num(get("code_line_share", 0)), 0.0), 1.0),
        min(max(_num(get("cjk_share", 0)), 0.0), 1.0),
        float(bool(get("json_mode"))),
        math.log1p(max(_num(get("prompt_tokens", 0)), 0.0)) / 10.0,
        min(_num(get("n_messages", 0)), 20.0) / 20.0,
    ]
    return np.array(values, dtype=np.float64)


def _num(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def class_inputs(cls: str) -> Vector:
    """The input of a request wholly of one class, with no other signal (for reports)."""
    x = np.zeros(len(INPUTS))
    x[0], x[INPUTS.index(f"p_{cls}")] = 1.0, 1.0
    return x


@dataclass(frozen=True, slots=True, eq=False)
class Evidence:
    """Sufficient statistics of greedy mtp requests: sum of x x^T, of x y, of y^2 and the
    count, y being log(ms per token) on the mtp instance."""

    xtx: Vector  # (d, d)
    xty: Vector  # (d,)
    yy: float
    n: int

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Evidence):
            return NotImplemented
        return (self.n == other.n and self.yy == other.yy
                and np.array_equal(self.xtx, other.xtx) and np.array_equal(self.xty, other.xty))

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def empty(cls, d: int = len(INPUTS)) -> Evidence:
        return cls(np.zeros((d, d)), np.zeros(d), 0.0, 0)

    @classmethod
    def of(cls, rows: Sequence[tuple[Vector, float]]) -> Evidence:
        if not rows:
            return cls.empty()
        x = np.array([r[0] for r in rows], dtype=np.float64)
        y = np.array([r[1] for r in rows], dtype=np.float64)
        return cls(x.T @ x, x.T @ y, float(y @ y), len(rows))

    def plus(self, x: Vector, y: float) -> Evidence:
        return Evidence(self.xtx + np.outer(x, x), self.xty + x * y, self.yy + y * y, self.n + 1)

    def merged(self, other: Evidence) -> Evidence:
        return Evidence(self.xtx + other.xtx, self.xty + other.xty, self.yy + other.yy,
                        self.n + other.n)

    def as_json(self) -> dict[str, Any]:
        return {"inputs": list(INPUTS), "xtx": self.xtx.tolist(), "xty": self.xty.tolist(),
                "yy": self.yy, "n": self.n}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Evidence:
        if list(data["inputs"]) != list(INPUTS):
            raise ValueError(f"speedup inputs {data['inputs']!r} differ from {list(INPUTS)!r}")
        d = len(INPUTS)
        xtx = np.array(data["xtx"], dtype=np.float64).reshape(d, d)
        xty = np.array(data["xty"], dtype=np.float64).reshape(d)
        return cls(xtx, xty, float(data["yy"]), int(data["n"]))


def prior_weights(prior: MachinePrior) -> tuple[Vector, Vector]:
    """Prior mean and variances of the weights: each class's log-speedup on its probability."""
    mean = np.zeros(len(INPUTS))
    var = np.full(len(INPUTS), FEATURE_SD**2)
    var[0] = prior.shift_sd**2
    for i, cls in enumerate(CLASSES, start=1):
        mean[i] = prior.log_speedup(cls)
        var[i] = prior.class_sd**2
    return mean, var


def normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


@dataclass(frozen=True, slots=True)
class Prediction:
    """log-speedup ~ Normal(mean, sd) for one request (sd: the model's uncertainty)."""

    mean: float
    sd: float
    n: int  # observations behind it

    def sample(self, z: float) -> float:
        """The speedup at a standard normal draw `z` (0: the posterior median)."""
        return math.exp(self.mean + z * self.sd)

    @property
    def speedup(self) -> float:
        return math.exp(self.mean)

    @property
    def pays(self) -> float:
        """The probability that the speedup exceeds 1 (that speculation pays)."""
        if self.sd <= 0:
            return 1.0 if self.mean > 0 else 0.0
        return normal_cdf(self.mean / self.sd)


# The joint model's parameters: the plain pace (log ms per token on a plain instance), the
# speedup weights over `INPUTS`, and the log-speedup of sampled or thinking requests.
PACE: Final = 0
WEIGHTS: Final = slice(1, 1 + len(INPUTS))
SAMPLED: Final = 1 + len(INPUTS)
PARAMETERS: Final = 2 + len(INPUTS)


@dataclass(frozen=True, slots=True, eq=False)
class PriorTerms:
    """What a posterior takes from the prior alone: its precision and precision-weighted mean
    over the joint parameters, and the noise variance. Computed once per prior, reused for
    every update of the evidence."""

    precision: Vector  # (D, D), diagonal
    weighted_mean: Vector  # (D,)
    noise: float

    @classmethod
    def of(cls, prior: MachinePrior) -> PriorTerms:
        mean = np.zeros(PARAMETERS)
        var = np.ones(PARAMETERS)
        mean[PACE], var[PACE] = math.log(prior.t_plain_ms), prior.pace_sd**2
        mean[WEIGHTS], var[WEIGHTS] = prior_weights(prior)
        mean[SAMPLED], var[SAMPLED] = math.log(prior.sampled_speedup), prior.shift_sd**2
        return cls(np.diag(1.0 / var), mean / var, prior.noise_sd**2)


class Posterior:
    """The joint posterior of the plain pace and the speedup weights.

    Every served request is one observation of log(ms per token) on the instance that served
    it: on a plain instance that is the pace; on an mtp instance the pace less the request's
    log-speedup (x . w, or the sampled log-speedup). So the speedup is identified from what
    both kinds of instance did, and the prior's pace only starts the model off: with a wide
    `pace_sd`, a few observations of a pace far from it win over it. Where one kind of instance
    is thin, the speedup's uncertainty says so (it carries the pace's), and the decision's
    Thompson draw explores it.
    """

    def __init__(self, terms: PriorTerms, greedy: Evidence, plain: ScalarEvidence,
                 sampled: ScalarEvidence) -> None:
        # greedy mtp rows a = (1, -x, 0) (x[0], the bias, is 1), sampled mtp rows (1, 0, -1),
        # plain rows (1, 0, 0); y = log(ms per token). The data's sum a a^T and sum a y:
        data, ay = np.zeros((PARAMETERS, PARAMETERS)), np.zeros(PARAMETERS)
        data[PACE, PACE] = greedy.n + plain.n + sampled.n
        data[PACE, WEIGHTS] = data[WEIGHTS, PACE] = -greedy.xtx[0]
        data[WEIGHTS, WEIGHTS] = greedy.xtx
        data[PACE, SAMPLED] = data[SAMPLED, PACE] = -sampled.n
        data[SAMPLED, SAMPLED] = sampled.n
        ay[PACE] = greedy.xty[0] + plain.total + sampled.total
        ay[WEIGHTS] = -greedy.xty
        ay[SAMPLED] = -sampled.total
        precision = terms.precision + data / terms.noise
        weighted = terms.weighted_mean + ay / terms.noise
        self.cov: Vector = np.asarray(np.linalg.inv(precision), dtype=np.float64)
        self.mean: Vector = self.cov @ weighted
        self.n = greedy.n
        self._w_mean = self.mean[WEIGHTS]
        self._w_cov = self.cov[WEIGHTS, WEIGHTS]

    def predict(self, x: Vector) -> Prediction:
        """The log-speedup x . w of a greedy request, with its uncertainty."""
        variance = float(x @ self._w_cov @ x)
        return Prediction(float(x @ self._w_mean), math.sqrt(max(variance, 0.0)), self.n)

    def pace(self, n: int) -> Prediction:
        """log(ms per token) on a plain instance (`n`: the plain observations behind it)."""
        return Prediction(float(self.mean[PACE]), _sd(self.cov[PACE, PACE]), n)

    def sampled(self, n: int) -> Prediction:
        """The log-speedup of sampled or thinking requests, whatever the request."""
        return Prediction(float(self.mean[SAMPLED]), _sd(self.cov[SAMPLED, SAMPLED]), n)

    def weights(self) -> dict[str, tuple[float, float]]:
        """Each input's weight and its standard deviation (for `policy explain`)."""
        sd = np.sqrt(np.clip(np.diag(self._w_cov), 0.0, None))
        return {name: (float(m), float(s))
                for name, m, s in zip(INPUTS, self._w_mean, sd, strict=True)}


def _sd(variance: float) -> float:
    return math.sqrt(max(float(variance), 0.0))


@dataclass(frozen=True, slots=True)
class ScalarEvidence:
    """Sufficient statistics of a scalar (count, sum, sum of squares)."""

    n: int = 0
    total: float = 0.0
    squares: float = 0.0

    def plus(self, value: float, weight: int = 1) -> ScalarEvidence:
        return ScalarEvidence(self.n + weight, self.total + weight * value,
                              self.squares + weight * value * value)

    def merged(self, other: ScalarEvidence) -> ScalarEvidence:
        return ScalarEvidence(self.n + other.n, self.total + other.total,
                              self.squares + other.squares)

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else math.nan

    def sd(self) -> float:
        if self.n < 2:
            return math.nan
        return math.sqrt(max(self.squares / self.n - self.mean**2, 0.0) * self.n / (self.n - 1))

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
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from classifiers.scores import CLASSES
from policies.learner.batch import SLOPE_PRIOR, SLOPE_PRIOR_SD, BatchEvidence
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
    # what predicts prompt-copy speculation (classifiers.copying): how much of the ask and the
    # tool results is quoted, and whether the reply is asked to re-emit it
    "quoted_code",  # share of the ask's and tool results' characters that are code
    "quoted_json",
    "quoted_text",
    "quoted_size",  # log(1 + those characters) / 10
    "edit_verb",  # rename, refactor, fix, translate, reformat, convert, ...
    "reemit",  # an edit format that re-emits input: whole file, SEARCH/REPLACE, a diff
    "edit_of_quoted",  # an edit or re-emit ask times the quoted share: the reply is mostly a copy
    "copy_breaks",  # a rename's sites per 100 quoted characters, capped at 1: where the copy breaks
)
COPY_INPUTS: Final = ("quoted_code", "quoted_json", "quoted_text", "quoted_size", "edit_verb",
                      "reemit", "edit_of_quoted", "copy_breaks")
# Quoted characters per rename site at which `copy_breaks` is 1: copied runs of ~25 tokens.
CHARS_PER_BREAK: Final = 100.0
# Prior spread of a weight that is not a class's, a copy input's or the machine-wide shift's.
FEATURE_SD: Final = 0.05
# Prior spread of a prompt-copy input's weight (log space: e^1 ~ 2.7x at one sd).
COPY_SD: Final = 1.0
# The config the machine prior's class speedups describe: depth-1 speculation, `profile: mtp`.
MTP_CONFIG: Final = "mtp"


# The features the inputs are read from, in the order `read_inputs` takes their values.
INPUT_FEATURES: Final = (
    "n_tools", "last_role_tool", "history_has_tool", "code_fences", "code_line_share",
    "cjk_share", "json_mode", "prompt_tokens", "n_messages",
    "quoted_code_share", "quoted_json_share", "quoted_text_share", "quoted_chars", "edit_verb",
    "reemit_format", "rename_sites",
)


def inputs(features: Mapping[str, Any], scores: Mapping[str, float] | None) -> Vector:
    """The model's input for one request, from the features and class scores as logged."""
    get = features.get
    return read_inputs([get(name) for name in INPUT_FEATURES], scores)


def read_inputs(values: Sequence[object], scores: Mapping[str, float] | None) -> Vector:
    """`inputs`, from the values of `INPUT_FEATURES` in order (a missing one: None): how the
    decision reads them from the request's features, without a dict of them all."""
    # Runs on every routing decision and every record the online model learns from: plain
    # lookups, no closures or intermediate dicts.
    (n_tools, last_role_tool, history_has_tool, code_fences, code_line_share, cjk_share,
     json_mode, prompt_tokens, n_messages, *copy) = values
    probabilities = scores or {}
    raw = [probabilities.get(c, 0.0) for c in CLASSES]
    total = sum(raw)
    share = [p / total for p in raw] if total > 0 else [1.0 / len(CLASSES)] * len(CLASSES)
    tools = _num(n_tools) > 0
    last_tool = bool(last_role_tool)
    history = bool(history_has_tool) or last_tool
    row = [
        1.0, *share,
        float(tools),
        float(history),
        float(tools and history),
        float(last_tool),
        min(_num(code_fences), 3.0) / 3.0,
        min(max(_num(code_line_share), 0.0), 1.0),
        min(max(_num(cjk_share), 0.0), 1.0),
        float(bool(json_mode)),
        math.log1p(max(_num(prompt_tokens), 0.0)) / 10.0,
        min(_num(n_messages), 20.0) / 20.0,
        *_copy_inputs(*copy),
    ]
    return np.array(row, dtype=np.float64)


def _copy_inputs(quoted_code_share: object, quoted_json_share: object, quoted_text_share: object,
                 quoted_chars: object, edit_verb: object, reemit_format: object,
                 rename_sites: object) -> tuple[float, ...]:
    code = _share(quoted_code_share)
    json_share = _share(quoted_json_share)
    text = _share(quoted_text_share)
    edit = float(bool(edit_verb))
    reemit = float(bool(reemit_format))
    # asked to edit it or to give it back whole, the reply is mostly a copy of what is quoted
    copy_ask = max(edit, reemit)
    chars = max(_num(quoted_chars), 0.0)
    sites = max(_num(rename_sites), 0.0)
    # each site is a rejected draft and a few undrafted tokens: what counts is how dense they are
    breaks = min(sites * CHARS_PER_BREAK / chars, 1.0) if chars else float(sites > 0)
    return (code, json_share, text, math.log1p(chars) / 10.0,
            edit, reemit, copy_ask * min(code + json_share + text, 1.0), breaks)


def _share(value: object) -> float:
    return min(max(_num(value), 0.0), 1.0)


def _num(value: object) -> float:
    return float(value) if isinstance(value, _NUMBERS) else 0.0


_NUMBERS: Final = (int, float)  # a tuple: `int | float` builds a union on every call


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
            old, now = list(data["inputs"]), list(INPUTS)
            raise ValueError(
                f"speedup inputs written by another version of the route model (not there "
                f"then: {[n for n in now if n not in old]}; gone since: "
                f"{[n for n in old if n not in now]})")
        d = len(INPUTS)
        xtx = np.array(data["xtx"], dtype=np.float64).reshape(d, d)
        xty = np.array(data["xty"], dtype=np.float64).reshape(d)
        return cls(xtx, xty, float(data["yy"]), int(data["n"]))


def prior_weights(prior: MachinePrior, config: str = MTP_CONFIG) -> tuple[Vector, Vector]:
    """Prior mean and variances of a config's weights: each class's log-speedup on its
    probability (the machine prior's figures describe depth-1 speculation, `mtp`; any other
    config starts neutral), and the prompt-copy inputs wide, as a copy decides whether n-gram
    speculation pays 3x or nothing and a few measurements must be able to say so."""
    mean = np.zeros(len(INPUTS))
    var = np.full(len(INPUTS), FEATURE_SD**2)
    var[0] = prior.shift_sd**2
    for i, cls in enumerate(CLASSES, start=1):
        mean[i] = prior.log_speedup(cls) if config == MTP_CONFIG else 0.0
        var[i] = prior.class_sd**2
    copy_sd = prior.class_sd if config == MTP_CONFIG else COPY_SD  # the prior describes mtp
    for name in COPY_INPUTS:
        var[INPUTS.index(name)] = copy_sd**2
    return mean, var


# A prediction whose sd is still this share of its prior sd (the machine-wide term aside) is
# unlearned: the evidence about requests like it is worth about half the prior's at most
# (variance down to 0.64 of it). At 0.5 the simulated stories of tests/router/test_configs.py,
# 2.4% slower on n-gram, were explored there 5 times in 14 late ones.
UNLEARNED_SPREAD: Final = 0.8


def normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


class Prediction(NamedTuple):
    """log-speedup ~ Normal(mean, sd) for one request (sd: the model's uncertainty; a named
    tuple: every decision builds one per speculation config)."""

    mean: float
    sd: float
    n: int  # observations behind it
    # its sd from the prior alone (0: not known): what the evidence has narrowed it from
    prior_sd: float = 0.0

    def sample(self, z: float) -> float:
        """The speedup at a standard normal draw `z` (0: the posterior median)."""
        return math.exp(self.mean + z * self.sd)

    @property
    def speedup(self) -> float:
        return math.exp(self.mean)

    @property
    def unlearned(self) -> bool:
        """The evidence has barely narrowed it: its spread is still at least `UNLEARNED_SPREAD`
        of the prior's for this request (the requests like it were not measured on the config,
        whatever was measured elsewhere)."""
        return self.prior_sd > 0 and self.sd >= UNLEARNED_SPREAD * self.prior_sd

    @property
    def pays(self) -> float:
        """The probability that the speedup exceeds 1 (that speculation pays)."""
        if self.sd <= 0:
            return 1.0 if self.mean > 0 else 0.0
        return normal_cdf(self.mean / self.sd)


@dataclass(frozen=True, slots=True, eq=False)
class PriorTerms:
    """What a posterior takes from the prior alone, per block of the joint parameters: the
    plain pace's mean and variance, each speculation config's weights' and its sampled
    log-speedup's, and the noise variance. Computed once per prior, reused for every update of
    the evidence (a config's block once, when it is first seen)."""

    pace: tuple[float, float]  # mean and variance of log(ms per token) on a plain instance
    noise: float
    prior: MachinePrior
    _blocks: dict[str, tuple[Vector, Vector]]  # config -> (mean, variance) of its d+1 terms

    @classmethod
    def of(cls, prior: MachinePrior) -> PriorTerms:
        return cls((math.log(prior.t_plain_ms), prior.pace_sd**2), prior.noise_sd**2, prior, {})

    def block(self, config: str) -> tuple[Vector, Vector]:
        """The prior of one config's weights over `INPUTS` and its sampled log-speedup."""
        known = self._blocks.get(config)
        if known is None:
            mean, var = prior_weights(self.prior, config)
            sampled = math.log(self.prior.sampled_speedup) if config == MTP_CONFIG else 0.0
            known = (np.append(mean, sampled), np.append(var, self.prior.shift_sd**2))
            self._blocks[config] = known
        return known


class Posterior:
    """The joint posterior of the plain pace and every speculation config's speedup weights.

    Every served request is one observation of log(ms per token) on the instance that served
    it: on a plain instance that is the pace; on an instance of config c the pace less the
    request's log-speedup there (x . w_c, or c's sampled log-speedup). So each speedup is
    identified from what the instances did, all against one pace, and the prior's pace only
    starts the model off: with a wide `pace_sd`, a few observations of a pace far from it win
    over it. Where a config is thin, its speedup's uncertainty says so (it carries the pace's),
    and the decision's Thompson draw explores it. A config with no evidence at all is
    predicted from the prior alone (its block is independent of the rest until measured).
    """

    def __init__(self, terms: PriorTerms, greedy: Mapping[str, Evidence], plain: ScalarEvidence,
                 sampled: Mapping[str, ScalarEvidence],
                 batch: Mapping[str, BatchEvidence] | None = None) -> None:
        self.terms = terms
        configs = sorted(c for c in {*greedy, *sampled}
                         if greedy.get(c, _NO_ROWS).n or sampled.get(c, _NO_SCALARS).n)
        batched = sorted(name for name, sums in (batch or {}).items() if sums.measured)
        d = len(INPUTS)
        size = 1 + len(configs) * (d + 1) + len(batched)
        # rows: greedy on c a = (1, .., -x in c's weights, ..), sampled on c (1, .., -1 in c's
        # sampled term, ..), plain (1, 0, ..); y = log(ms per token). Sum a a^T and sum a y:
        data, ay = np.zeros((size, size)), np.zeros(size)
        prior_mean, prior_var = np.zeros(size), np.ones(size)
        prior_mean[PACE], prior_var[PACE] = terms.pace
        data[PACE, PACE] = plain.n
        ay[PACE] = plain.total
        self._blocks: dict[str, slice] = {}
        for i, config in enumerate(configs):
            w = slice(1 + i * (d + 1), 1 + i * (d + 1) + d)
            s = w.stop
            self._blocks[config] = slice(w.start, s + 1)
            prior_mean[w.start:s + 1], prior_var[w.start:s + 1] = terms.block(config)
            rows, scalars = greedy.get(config, _NO_ROWS), sampled.get(config, _NO_SCALARS)
            data[PACE, PACE] += rows.n + scalars.n
            data[PACE, w] = data[w, PACE] = -rows.xtx[0]
            data[w, w] = rows.xtx
            data[PACE, s] = data[s, PACE] = -scalars.n
            data[s, s] = scalars.n
            ay[PACE] += rows.xty[0] + scalars.total
            ay[w] = -rows.xty
            ay[s] = -scalars.total
        # each instance that served in a batch: its slope over log(batch), crossed with the
        # pace and with its config's terms (`policies.learner.batch`)
        self._slopes: dict[str, int] = {}
        for k, name in enumerate(batched, start=size - len(batched)):
            sums = (batch or {})[name]
            self._slopes[name] = k
            prior_mean[k], prior_var[k] = SLOPE_PRIOR, SLOPE_PRIOR_SD**2
            data[PACE, k] = data[k, PACE] = sums.u
            data[k, k] = sums.uu
            ay[k] = sums.uy
            block = self._blocks.get(sums.config)
            if block is not None:
                w, s = slice(block.start, block.stop - 1), block.stop - 1
                if sums.xu:
                    data[w, k] = data[k, w] = -np.array(sums.xu)
                data[s, k] = data[k, s] = -sums.sampled_u
        precision = np.diag(1.0 / prior_var) + data / terms.noise
        weighted = prior_mean / prior_var + ay / terms.noise
        self.cov: Vector = np.asarray(np.linalg.inv(precision), dtype=np.float64)
        self.mean: Vector = self.cov @ weighted
        self._n = {c: greedy.get(c, _NO_ROWS).n for c in configs}
        self._views: dict[str, tuple[Vector, Vector, float, float]] = {}
        self._stacks: dict[tuple[str, ...], tuple[Vector, Vector, Vector]] = {}
        self._local_vars: dict[str, Vector] = {}

    def _view(self, config: str) -> tuple[Vector, Vector, float, float]:
        """A config's weights' mean and covariance, its sampled term's mean and variance."""
        view = self._views.get(config)
        if view is None:
            block = self._blocks.get(config)
            if block is None:
                mean, var = self.terms.block(config)
                view = (mean[:-1], np.diag(var[:-1]), float(mean[-1]), float(var[-1]))
            else:
                w = slice(block.start, block.stop - 1)
                s = block.stop - 1
                view = (self.mean[w], self.cov[w, w], float(self.mean[s]), float(self.cov[s, s]))
            self._views[config] = view
        return view

    def predict(self, x: Vector, config: str = MTP_CONFIG) -> Prediction:
        """The log-speedup x . w of a greedy request on `config`, with its uncertainty."""
        w_mean, w_cov, _, _ = self._view(config)
        variance = float(x @ w_cov @ x)
        return Prediction(float(x @ w_mean), math.sqrt(max(variance, 0.0)),
                          self._n.get(config, 0), self._prior_sd(x, config))

    def config_pace(self, x: Vector, config: str) -> Prediction:
        """log(ms per token) of a greedy request with inputs `x` on `config` (the pace less
        its log-speedup there), its sd from the joint posterior."""
        block = self._blocks.get(config)
        if block is None:
            speedup = self.predict(x, config)
            variance = float(self.cov[PACE, PACE]) + speedup.sd**2
            return Prediction(float(self.mean[PACE]) - speedup.mean, _sd(variance), 0)
        a = np.zeros(len(self.mean))
        a[PACE], a[block.start:block.stop - 1] = 1.0, -x
        return Prediction(float(a @ self.mean), _sd(float(a @ self.cov @ a)),
                          self._n.get(config, 0))

    def predict_many(self, x: Vector, configs: tuple[str, ...]) -> list[Prediction]:
        """`predict` for several configs at once (one decision prices every allowed config:
        one stacked product instead of one per config)."""
        if len(configs) == 1:  # one product each way, no stack (1.5x cheaper)
            return [self.predict(x, configs[0])]
        stacked = self._stacks.get(configs)
        if stacked is None:
            views = [self._view(c) for c in configs]
            stacked = (np.stack([v[0] for v in views]), np.stack([v[1] for v in views]),
                       np.stack([self._local_prior_var(c) for c in configs]))
            self._stacks[configs] = stacked
        means = stacked[0] @ x
        variances = (stacked[1] @ x) @ x
        prior_sds = np.sqrt(stacked[2] @ (x * x))
        return [Prediction(float(m), math.sqrt(max(float(v), 0.0)), self._n.get(c, 0),
                           float(p))
                for c, m, v, p in zip(configs, means, variances, prior_sds, strict=True)]

    def _prior_sd(self, x: Vector, config: str) -> float:
        return math.sqrt(float(self._local_prior_var(config) @ (x * x)))

    def _local_prior_var(self, config: str) -> Vector:
        """The prior variances of c's weights, but for the machine-wide shift's (0): x . w_c's
        prior sd over them is what is the request's own, which measuring other requests on
        the config (the startup probe's, most of all) does not narrow."""
        local = self._local_vars.get(config)
        if local is None:
            _, var = self.terms.block(config)
            local = var[:-1].copy()
            local[0] = 0.0
            self._local_vars[config] = local
        return local

    def batch_slope(self, instance: str) -> tuple[float, float] | None:
        """`instance`'s slope of log(ms per token) over log(batch) and its sd (None: it has
        not served in a batch above 1)."""
        k = self._slopes.get(instance)
        if k is None:
            return None
        return float(self.mean[k]), _sd(self.cov[k, k])

    def pace(self, n: int) -> Prediction:
        """log(ms per token) on a plain instance (`n`: the plain observations behind it)."""
        return Prediction(float(self.mean[PACE]), _sd(self.cov[PACE, PACE]), n)

    def sampled(self, n: int, config: str = MTP_CONFIG) -> Prediction:
        """The log-speedup of sampled or thinking requests on `config`, whatever the request."""
        _, _, mean, variance = self._view(config)
        return Prediction(mean, _sd(variance), n)

    def weights(self, config: str = MTP_CONFIG) -> dict[str, tuple[float, float]]:
        """Each input's weight on `config` and its standard deviation (for `policy explain`)."""
        w_mean, w_cov, _, _ = self._view(config)
        sd = np.sqrt(np.clip(np.diag(w_cov), 0.0, None))
        return {name: (float(m), float(s))
                for name, m, s in zip(INPUTS, w_mean, sd, strict=True)}


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


PACE: Final = 0  # the plain pace's index among the joint parameters
_NO_ROWS: Final = Evidence.empty()
_NO_SCALARS: Final = ScalarEvidence()

"""How many tokens a request will produce: a regression of log(completion tokens) on the
request's inputs (`policies.learner.speedup.INPUTS`), over the machine prior's typical length.

Pure: numpy arithmetic on sums passed in; no I/O, no clock, no globals.

Why per request and not per class: the finish rule prices the work an instance has left and
the work a request brings, both in tokens. One class runs 5-400 tokens (on the real plain +
n-gram pair at 400 tokens, chat turns of 5-34 tokens were priced at a class mean of 120-200),
so a busy instance's remaining time and an edit's gain by waiting for the instance that copies
it were both too rough to decide on. The inputs say what the class does not: an edit of quoted
code returns about the quote (its length is the quote's), a greeting a line, and the prompt's
size and the quoted share move with the answer's. The sums are `Evidence` (additive), so
replicas share them as they share the speedup's.

The prediction is the mean of a log-normal: exp(x . w + s^2 / 2), capped by the request's
max_tokens. `s` is the residual spread of the request's class (mixed by its class
probabilities), from the sums kept per class (exact: a class's squared residuals at any
weights are its own sums' yy - 2 w.xty + w.xtx.w), each shrunk toward the spread over all
classes, and that toward `NOISE_SD`. The spread differs by class: an edit's length is its
quote's, within a few percent; a story on the same ask runs to 14 tokens or to 400, and its
mean is then well above its median. Cold, it is the prior's typical completion for every
request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import numpy as np

from classifiers.scores import CLASSES
from policies.learner.speedup import CLASS_INPUTS, INPUTS, Evidence, Vector

# Prior spread of log(tokens) of a request around the prior's typical completion (e^1.5 ~ 4.5x),
# and of each input's weight on it (the inputs are scaled to about [0, 1]).
BIAS_SD: Final = 1.5
WEIGHT_SD: Final = 1.0
# A request's log(tokens) around its prediction before the log says otherwise (e^0.7 ~ 2x),
# worth this many requests' residuals.
NOISE_SD: Final = 0.7
NOISE_PRIOR_WEIGHT: Final = 3.0


class LengthModel:
    """The posterior of the length regression's weights and each class's residual spread."""

    __slots__ = ("class_var", "covariance", "noise_var", "weights")

    def __init__(self, typical_tokens: float, by_class: Mapping[str, Evidence]) -> None:
        d = len(INPUTS)
        evidence = Evidence.empty()
        for sums in by_class.values():
            evidence = evidence.merged(sums)
        prior_var = np.full(d, WEIGHT_SD**2)
        prior_var[0] = BIAS_SD**2
        prior_mean = np.zeros(d)
        # the log-normal's mean is exp(mu + s^2 / 2): cold, it is the typical completion
        prior_mean[0] = math.log(max(typical_tokens, 1.0)) - NOISE_SD**2 / 2
        noise = NOISE_SD**2
        precision = np.diag(1.0 / prior_var) + evidence.xtx / noise
        weighted = prior_mean / prior_var + evidence.xty / noise
        self.covariance: np.ndarray = np.linalg.inv(precision)  # of the weights
        self.weights: Vector = self.covariance @ weighted
        self.noise_var = _shrunk_var(self.weights, evidence, NOISE_SD**2)
        # in the order of the class probabilities among the inputs
        self.class_var: Vector = np.array([
            _shrunk_var(self.weights, by_class.get(cls, _NONE), self.noise_var)
            for cls in CLASSES])

    def expected(self, x: Vector, max_tokens: int) -> float:
        """The request's expected completion tokens, capped by its `max_tokens` (0: none)."""
        spread = float(x[_CLASS_SLICE] @ self.class_var)
        mean = math.exp(min(float(x @ self.weights) + spread / 2, _MAX_LOG_TOKENS))
        return float(min(mean, max_tokens)) if max_tokens > 0 else mean

    def spread(self, x: Vector) -> float:
        """How far the request's length may stray from `expected`: the sd of its log, its
        class's residual spread and the weights' own uncertainty at its inputs (a request
        unlike any logged one is known less well). What a busy instance has left is priced
        from it (`policies.decision.finish.time_left`); the mean leaves the weights'
        uncertainty out, which cold would multiply every length by 3-10."""
        return math.sqrt(float(x[_CLASS_SLICE] @ self.class_var) + float(x @ self.covariance @ x))


def _shrunk_var(weights: Vector, evidence: Evidence, toward: float) -> float:
    """The residuals' variance at `weights`, from the sums alone (sum (y - x.w)^2 =
    yy - 2 w.xty + w.xtx.w), shrunk toward `toward` (worth NOISE_PRIOR_WEIGHT residuals)."""
    k = NOISE_PRIOR_WEIGHT
    squares = evidence.yy - 2.0 * float(weights @ evidence.xty) \
        + float(weights @ evidence.xtx @ weights)
    return (max(squares, 0.0) + k * toward) / (evidence.n + k)


# exp(16) ~ 8.9M tokens: past any context, so a wild extrapolation stays finite
_MAX_LOG_TOKENS: Final = 16.0
_NONE: Final = Evidence.empty()
# where the class probabilities sit among the inputs (they sum to 1)
_CLASS_SLICE: Final = slice(INPUTS.index(CLASS_INPUTS[0]), INPUTS.index(CLASS_INPUTS[-1]) + 1)

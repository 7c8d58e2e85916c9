"""An instance's per-token time against the batch it decodes in, learned from its records.

Pure: sums in, a curve out; no I/O, no clock, no globals.

An engine that serves several requests at once (llama-server's slots, vLLM's and SGLang's
batches) decodes each one slower as the batch grows: on a CPU nearly in proportion to it, on a
GPU barely at small batches, and speculation's gain fades as verification turns compute-bound.
So the per-token time of a request on instance i decoding in a batch of b is modelled as

    log(ms per token) = its pace at a batch of 1 (the route model's) + slope_i x log(b)

one slope per instance (its machine's batch cost and, on a speculating instance, the fading of
its config's gain: the interaction term), learned from each record's residual against the pace
its decision predicted at a batch of 1 (`decision.pace_ms`), over the log of the mean batch it
ran in (`outcome.batch_mean`). The residual's intercept is learned beside the slope so that a
route model still off at a batch of 1 does not bend the curve. No machine constant: the prior
is wide, between a flat GPU (slope 0) and a CPU's proportional cost (slope 1).

A record without a batch (older logs, `slots: 1`) is a batch of 1: log(1) = 0, it teaches the
intercept only, and the curve of an instance that serves one request at a time is never read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

# The slope's prior: wide between 0 (flat, a GPU at small batches) and 1 (proportional, a CPU).
SLOPE_PRIOR: Final = 0.5
SLOPE_PRIOR_SD: Final = 0.5
# The residual's intercept (the route model's error at a batch of 1) and the noise per record.
INTERCEPT_SD: Final = 0.5
NOISE_SD: Final = 0.3


@dataclass(frozen=True, slots=True)
class BatchEvidence:
    """One instance's sums over its records: u = log(mean batch), y = log(ms per token) less
    the log of the pace predicted at a batch of 1 (additive: merge by adding)."""

    n: int = 0
    u: float = 0.0
    uu: float = 0.0
    y: float = 0.0
    uy: float = 0.0
    config: str = ""  # the instance's speculation config, as its records name it

    def plus(self, batch: float, residual: float, config: str = "") -> BatchEvidence:
        u = math.log(max(batch, 1.0))
        return BatchEvidence(self.n + 1, self.u + u, self.uu + u * u, self.y + residual,
                             self.uy + u * residual, config or self.config)

    def merged(self, other: BatchEvidence) -> BatchEvidence:
        return BatchEvidence(self.n + other.n, self.u + other.u, self.uu + other.uu,
                             self.y + other.y, self.uy + other.uy, other.config or self.config)

    def as_json(self) -> list[float | str]:
        return [self.n, self.u, self.uu, self.y, self.uy, self.config]

    @classmethod
    def from_json(cls, raw: Any) -> BatchEvidence:
        n, u, uu, y, uy, config = raw
        return cls(int(n), float(u), float(uu), float(y), float(uy), str(config))

    def curve(self) -> BatchCurve:
        """The slope's posterior (a two-parameter Bayesian regression, intercept and slope)."""
        noise = NOISE_SD**2
        # precision = prior's + data's; mean = precision^-1 (prior mean / var + data / noise)
        a = 1.0 / INTERCEPT_SD**2 + self.n / noise
        b = self.u / noise
        d = 1.0 / SLOPE_PRIOR_SD**2 + self.uu / noise
        r0 = self.y / noise
        r1 = SLOPE_PRIOR / SLOPE_PRIOR_SD**2 + self.uy / noise
        det = a * d - b * b
        slope = (a * r1 - b * r0) / det
        return BatchCurve(slope, math.sqrt(a / det), self.n, self.uu > 0.0)


class BatchCurve(NamedTuple):
    """One instance's per-token time against its batch: x b^slope of its pace at a batch of 1."""

    slope: float
    sd: float
    n: int  # records behind it
    measured: bool = False  # some record ran in a batch above 1

    def factor(self, batch: float) -> float:
        """Its per-token time in a batch of `batch` over its time alone."""
        return math.exp(self.slope * math.log(batch)) if batch > 1.0 else 1.0


PRIOR_CURVE: Final = BatchEvidence().curve()
NO_BATCH_EVIDENCE: Final = BatchEvidence()

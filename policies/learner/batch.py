"""An instance's per-token time against the batch it decodes in: its term in the route model.

Pure: sums in, a curve out; no I/O, no clock, no globals.

An engine that serves several requests at once (llama-server's slots, vLLM's and SGLang's
batches) decodes each one slower as the batch grows: on a CPU nearly in proportion to it, on a
GPU barely at small batches, and speculation's gain fades as verification turns compute-bound.
So the route model's regression of log(ms per token) (`policies.learner.speedup.Posterior`) has
one more term per instance i that has served in a batch:

    log(ms per token) = pace - x . w_c + slope_i x log(b)

b being the mean batch the request ran in (`outcome.batch_mean`: the requests served at once on
its instance over its life, itself included). One slope per instance: its machine's batch cost
and, on a speculating instance, the fading of its config's gain (the interaction term). It is
learned jointly with the paces and speedups, from the same records, so a pace measured in a
batch of 4 is not read as a slow machine, nor a cold start's ramp from an empty instance as a
batch's cost. No machine constant: the prior is wide, between a flat GPU (slope 0) and a CPU's
proportional cost (slope 1).

A record without a batch (older logs, `slots: 1`) is a batch of 1: log(1) = 0, it adds nothing
here, and the curve of an instance that serves one request at a time is never read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

# The slope's prior: wide between 0 (flat, a GPU at small batches) and 1 (proportional, a CPU).
SLOPE_PRIOR: Final = 0.5
SLOPE_PRIOR_SD: Final = 0.5


@dataclass(frozen=True, slots=True, eq=False)
class BatchEvidence:
    """One instance's sums over its records that ran in a batch above 1, u = log(mean batch),
    y = log(ms per token): what its slope's column adds to the route model's regression
    (additive: merge by adding). `xu`: the sum of x u over its greedy rows (x: the request's
    inputs, crossed with its config's weights); `sampled_u`: u over its sampled rows."""

    n: int = 0
    u: float = 0.0
    uu: float = 0.0
    uy: float = 0.0
    sampled_u: float = 0.0
    xu: tuple[float, ...] = ()
    config: str = ""  # the instance's speculation config, as its records name it
    # the batch a request met against the one it ran in over its life, v = log(its start):
    # sums of v, v^2 and v u (how the batch moves after a start: open or closed loop)
    v: float = 0.0
    vv: float = 0.0
    uv: float = 0.0

    def plus(self, batch: float, y: float, config: str,
             x: Sequence[float] | None = None, sampled: bool = False,
             start: float = 1.0) -> BatchEvidence:
        """One more record (`batch`: its mean batch, `start`: the batch it joined): `x` for a
        greedy row on a speculating instance, `sampled` for a sampled one, neither for a
        plain instance's."""
        u = math.log(batch) if batch > 1.0 else 0.0
        v = math.log(start) if start > 1.0 else 0.0
        xu = self.xu
        if x is not None:
            xu = tuple(a + b * u for a, b in zip(xu or (0.0,) * len(x), x, strict=True))
        return BatchEvidence(self.n + 1, self.u + u, self.uu + u * u, self.uy + u * y,
                             self.sampled_u + (u if sampled else 0.0), xu, config or self.config,
                             self.v + v, self.vv + v * v, self.uv + u * v)

    def merged(self, other: BatchEvidence) -> BatchEvidence:
        xu = (tuple(a + b for a, b in zip(self.xu, other.xu, strict=True))
              if self.xu and other.xu else self.xu or other.xu)
        return BatchEvidence(self.n + other.n, self.u + other.u, self.uu + other.uu,
                             self.uy + other.uy, self.sampled_u + other.sampled_u, xu,
                             other.config or self.config, self.v + other.v,
                             self.vv + other.vv, self.uv + other.uv)

    def drift(self) -> tuple[float, float]:
        """(lift, carry): log(mean batch) ~ lift + carry x log(batch joined), the regression's
        posterior mean from a prior of the batch staying as joined (0, 1)."""
        noise = DRIFT_NOISE_SD**2
        a = 1.0 / DRIFT_LIFT_SD**2 + self.n / noise
        b = self.v / noise
        d = 1.0 / DRIFT_CARRY_SD**2 + self.vv / noise
        r0 = self.u / noise
        r1 = 1.0 / DRIFT_CARRY_SD**2 + self.uv / noise
        det = a * d - b * b
        return (d * r0 - b * r1) / det, (a * r1 - b * r0) / det

    @property
    def measured(self) -> bool:
        """Some record here ran in a batch above 1: there is a slope to learn."""
        return self.uu > 0.0

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BatchEvidence):
            return NotImplemented
        return self.as_json() == other.as_json()

    __hash__ = None  # type: ignore[assignment]

    def as_json(self) -> dict[str, Any]:
        return {"n": self.n, "u": self.u, "uu": self.uu, "uy": self.uy,
                "sampled_u": self.sampled_u, "xu": list(self.xu), "config": self.config,
                "v": self.v, "vv": self.vv, "uv": self.uv}

    @classmethod
    def from_json(cls, raw: Any) -> BatchEvidence:
        return cls(int(raw["n"]), float(raw["u"]), float(raw["uu"]), float(raw["uy"]),
                   float(raw["sampled_u"]), tuple(float(v) for v in raw["xu"]),
                   str(raw["config"]), float(raw["v"]), float(raw["vv"]), float(raw["uv"]))


class BatchCurve(NamedTuple):
    """One instance's per-token time against its batch: x b^slope of its pace at a batch of 1;
    and how the batch a request joins there moves over its life (`BatchEvidence.drift`)."""

    slope: float
    sd: float
    n: int = 0  # records in a batch above 1 behind it
    measured: bool = False
    lift: float = 0.0
    carry: float = 1.0

    def factor(self, batch: float) -> float:
        """Its per-token time in a batch of `batch` over its time alone."""
        return math.exp(self.slope * math.log(batch)) if batch > 1.0 else 1.0

    def joining(self, batch: int) -> float:
        """The per-token time over its time alone of a request that joins a batch of `batch`
        (itself included): at the mean batch it is expected to run in over its life."""
        if batch <= 1 and self.lift <= 0.0:
            return 1.0
        expected = self.lift + self.carry * math.log(batch)
        return math.exp(self.slope * expected) if expected > 0.0 else 1.0


# How the batch moves after a request joins it, a priori: it stays as joined (lift 0, carry 1).
DRIFT_LIFT_SD: Final = 0.3
DRIFT_CARRY_SD: Final = 0.5
DRIFT_NOISE_SD: Final = 0.3

PRIOR_CURVE: Final = BatchCurve(SLOPE_PRIOR, SLOPE_PRIOR_SD)
NO_BATCH: Final = BatchEvidence()

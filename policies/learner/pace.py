"""Each kind of instance's pace as the route model sees it, against the machine prior's: what
`policy explain`, the dashboard, `/readyz` and the startup log show.

Pure: arithmetic on a `RouteModel`; no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from policies.learner.routemodel import PLAIN_CONFIG, RouteModel
from policies.learner.speedup import MTP_CONFIG, Vector, inputs, prior_weights
from policies.policyfile.machine import MachinePrior

# A measured pace this far from the prior's (either way) is said to discount the prior.
FAR_FACTOR: Final = 2.0


@dataclass(frozen=True, slots=True)
class Pace:
    """ms per token on one kind of instance: the model's median, its 1-sd range, the prior's."""

    profile: str
    ms_per_token: float
    low: float
    high: float
    n: int  # served requests of this profile behind it (startup probes included)
    probes: int
    source: str  # prior | probe | log
    prior_ms_per_token: float

    @property
    def far_from_prior(self) -> bool:
        return self.source != "prior" and far(self.ms_per_token, self.prior_ms_per_token)

    def as_dict(self) -> dict[str, Any]:
        return {"ms_per_token": round(self.ms_per_token, 3), "low": round(self.low, 3),
                "high": round(self.high, 3), "n": self.n, "probes": self.probes,
                "source": self.source, "prior_ms_per_token": round(self.prior_ms_per_token, 3)}


def paces(model: RouteModel, configs: Iterable[str] = ()) -> tuple[Pace, ...]:
    """The plain pace, then each speculation config's (those measured, and `configs`: the
    instances' own, measured or not) for the average greedy request served there so far (a
    request of no particular class before any). With nothing declared or measured, the
    shorthand `mtp` stands for the speculating instance."""
    e, prior = model.evidence, model.prior
    pace = model.pace
    plain = Pace(PLAIN_CONFIG, pace.speedup, pace.sample(-1.0), pace.sample(1.0), e.plain.n,
                 e.probes.get(PLAIN_CONFIG, 0), model.pace_source(PLAIN_CONFIG),
                 prior.t_plain_ms)
    named = sorted({*e.configs, *configs} - {PLAIN_CONFIG}) or [MTP_CONFIG]
    return (plain, *(_config_pace(model, config) for config in named))


def _config_pace(model: RouteModel, config: str) -> Pace:
    x = typical_inputs(model, config)
    # log(ms per token) = pace - x . w_config, with its sd from the joint posterior
    p = model.posterior.config_pace(x, config)
    return Pace(config, p.speedup, p.sample(-1.0), p.sample(1.0), model.measured(config),
                model.evidence.probes.get(config, 0), model.pace_source(config),
                prior_pace(model.prior, config, x))


def prior_pace(prior: MachinePrior, config: str, x: Vector) -> float:
    """The ms per token the prior expects on `config` for a request with speedup inputs `x`."""
    if config == PLAIN_CONFIG:
        return prior.t_plain_ms
    return prior.t_plain_ms / math.exp(float(x @ prior_weights(prior, config)[0]))


def typical_inputs(model: RouteModel, config: str) -> Vector:
    """The mean speedup input of the greedy requests learned from on `config` (x[0] is 1 in
    each, so the bias column of the sums holds their total); none yet: no class in
    particular."""
    greedy = model.evidence.greedy.get(config)
    if greedy is not None and greedy.n:
        return np.asarray(greedy.xtx[0] / greedy.n, dtype=np.float64)
    return inputs({}, None)


def far(measured_ms: float, expected_ms: float) -> bool:
    """Whether a measured pace is more than `FAR_FACTOR` from the expected one, either way."""
    return not 1 / FAR_FACTOR <= measured_ms / expected_ms <= FAR_FACTOR


def prior_note(prior: MachinePrior, pace: Pace) -> str:
    """What the model's pace on one kind of instance says of the prior ('' when near it)."""
    if not pace.far_from_prior:
        return ""
    return discount_note(prior.name, pace.profile, pace.prior_ms_per_token,
                         f"{pace.profile} ({pace.source}, n={pace.n})", pace.ms_per_token)


def discount_note(prior: str, profile: str, expected_ms: float, who: str,
                  measured_ms: float) -> str:
    """'prior gb10-ds4 says 68 ms/token on plain, plain-0 measures 6.9: the prior is
    discounted'."""
    return (f"prior {prior} says {expected_ms:.3g} ms/token on {profile}, {who} measures "
            f"{measured_ms:.3g}: the prior is discounted")

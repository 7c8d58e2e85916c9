"""The one decision rule: send a request to the healthy instance that will finish it soonest.

Pure: no I/O, no clock (elapsed times come in with the in-flight requests), no globals.

For each candidate instance, the predicted finish is
    the work queued on it (in-flight requests' predicted remaining time, served one at a time)
  + the prefill of the prompt (less the cached prefix when the instance holds the conversation)
  + the expected completion tokens x its per-token time for this request
    (plain: the machine's plain step; mtp: that step over the request's predicted speedup).
The speedup is drawn from its posterior (Thompson sampling, one standard normal draw `z`),
and a draw that would pick another instance than the posterior mean is followed only when the
expected regret of doing so (the mean finish there over the best mean finish, less one) is at
most `max_regret`: exploration costs at most that share of a request's time, and only where the
evidence leaves the choice open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Final

# An in-flight request that has run past its predicted time is taken to need at least this
# share of its prediction more (it is busy, not done).
OVERRUN_SHARE: Final = 0.2


@dataclass(frozen=True, slots=True)
class InFlight:
    """One request being served (or waiting) on an instance, as the router tracks it."""

    predicted_ms: float  # predicted prefill + decode time when it was routed
    elapsed_ms: float  # since it was sent


def queued_ms(inflight: Sequence[InFlight]) -> float:
    """Work ahead on an instance that serves one request at a time, oldest first: what is left
    of the oldest request, then the whole predicted time of the others."""
    if not inflight:
        return 0.0
    ordered = sorted(inflight, key=lambda f: -f.elapsed_ms)
    head = ordered[0]
    left = max(head.predicted_ms - head.elapsed_ms, OVERRUN_SHARE * head.predicted_ms)
    return left + sum(f.predicted_ms for f in ordered[1:])


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the rule knows about one healthy instance for this request."""

    name: str
    profile: str
    queue_ms: float
    prefill_ms: float
    ms_per_token: float  # at the posterior median of the speedup
    sampled_ms_per_token: float  # at the Thompson draw

    def finish_ms(self, tokens: float, sampled: bool = False) -> float:
        per_token = self.sampled_ms_per_token if sampled else self.ms_per_token
        return self.queue_ms + self.prefill_ms + tokens * per_token

    def service_ms(self, tokens: float) -> float:
        """This request's own time on the instance, once it starts."""
        return self.prefill_ms + tokens * self.ms_per_token


@dataclass(frozen=True, slots=True)
class Choice:
    candidate: Candidate
    explored: bool  # the Thompson draw picked another instance than the posterior mean
    finish_ms: Mapping[str, float]  # instance -> predicted finish at the posterior mean


def soonest(
    candidates: Sequence[Candidate], tokens: float, *, max_regret: float
) -> Choice | None:
    """The candidate with the soonest predicted finish (Thompson draw, regret-bounded)."""
    if not candidates:
        return None
    mean = {c.name: c.finish_ms(tokens) for c in candidates}
    # ties go to a plain instance (a draft costs power for nothing), then by name
    best = min(candidates, key=lambda c: (mean[c.name], c.profile != "plain", c.name))
    drawn = min(candidates, key=lambda c: (c.finish_ms(tokens, sampled=True),
                                           c.profile != "plain", c.name))
    if drawn.name != best.name and _regret(mean[drawn.name], mean[best.name]) <= max_regret:
        return Choice(drawn, True, mean)
    return Choice(best, False, mean)


def _regret(chosen_ms: float, best_ms: float) -> float:
    if best_ms <= 0:
        return 0.0 if chosen_ms <= 0 else math.inf
    return chosen_ms / best_ms - 1.0


def normal_draw(uniform: float | None) -> float:
    """A standard normal draw from a uniform one (None: 0, the median)."""
    if uniform is None:
        return 0.0
    return NormalDist().inv_cdf(min(max(uniform, 1e-9), 1.0 - 1e-9))

"""What the decision takes: one request (`Ask`) and the state it is decided in (`State`).

Pure data: frozen dataclasses and named tuples, built by the caller once per request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from classifiers.features import Features
from classifiers.scores import Scores
from policies.decision.batching import batch_work
from policies.decision.finish import NOTHING_BEHIND, Behind, InFlight, Queued, Running, queued_ms
from policies.decision.pins import NO_CONTEXT, RequestContext
from policies.decision.sessions import Held
from policies.learner.arms import EMPTY_ARMS, ArmsState
from policies.learner.routemodel import RouteModel
from policies.policyfile.schema import Policy


@dataclass(frozen=True, slots=True)
class Ask:
    """One request, as the decision reads it."""

    features: Features
    scores: Scores | None  # None: the classifier failed
    context: RequestContext = NO_CONTEXT  # the client's hints: header, model, API key
    endpoint: str = "chat"
    held: Held | None = None  # where this conversation's prefix is cached
    # a uniform random number, for a route's arm exploration and then the finish rule's
    # Thompson draw (None: neither explores)
    draw: float | None = None

    def sending(self, features: Features) -> Ask:
        """The request as a route's rewrite will send it."""
        return replace(self, features=features)


class BackendState(NamedTuple):
    """What the decision needs to know about one backend instance (a named tuple: every
    decision reads one per instance, built ~2x cheaper than a frozen dataclass)."""

    name: str
    profile: str
    healthy: bool = True
    inflight: int = 0
    queue: tuple[InFlight, ...] = ()  # the requests in flight on it, with their predictions
    pools: frozenset[str] = frozenset()  # the named pools it belongs to (config.yaml `pools`)
    # `queue` as the rule uses it, when the caller summed it up already (the proxy's pool
    # does, from its in-flight table); None: computed from `queue`
    queued: Queued | None = None
    # among instances that cost the same, the lowest goes first: replicas that rank them
    # differently spread requests decided at the same moment instead of piling onto one
    tie_rank: int = 0
    # the chance that a request sent here now meets another replica's, sent at the same moment
    # by one that did not know of this one (a free instance in another replica's share)
    contended: float = 0.0
    # its speculation config: what the route model prices it by ('': its profile's shorthand,
    # `mtp` or `plain`)
    spec: str = ""
    # what the recent requests would have lost had it been taken (the price of making the
    # next one go elsewhere, while requests are on it)
    behind: Behind = NOTHING_BEHIND
    slots: int = 1  # requests it serves at once (1: one at a time, the rest queued)

    @property
    def config(self) -> str:
        return self.spec or self.profile

    def work(self) -> Queued:
        if self.queued is not None:
            return self.queued
        if self.slots > 1:
            return batch_work([Running(f.predicted_ms, -f.elapsed_ms / 1000.0, f.spread,
                                       f.most_ms) for f in self.queue], 0.0, self.slots)
        return Queued(len(self.queue), queued_ms(self.queue))


@dataclass(frozen=True, slots=True)
class State:
    """What a request is decided against: the policy, the route model, the instances and the
    arms' learned sums, as they are at that moment."""

    policy: Policy
    model: RouteModel  # the machine prior with what the log taught
    backends: Sequence[BackendState]
    arms: ArmsState = EMPTY_ARMS

    @property
    def pools(self) -> frozenset[str]:
        return frozenset(pool for b in self.backends for pool in b.pools)

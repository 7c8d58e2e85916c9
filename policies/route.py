"""The routing decision with pools and rewrites: which arm (pool, rewrite), then which instance.

Pure: no I/O, no clock, no globals. Wraps `policies.decide.decide`, in this order:
1. The pins on the client's request (the `x-specroute-route` header, a model alias, an API
   key) and a classifier failure: `decide` as always, the request sent unchanged. A header
   naming a named pool sends the request there, unchanged.
2. The class route for the request's endpoint. A built-in route (`mtp | plain | auto`): `decide`
   as always, unchanged request.
3. A pool route: an arm is chosen among the route's own arms (`policies.arms`), and its rewrite
   is applied to the features, so that the rules after it judge the request as it will be sent.
   A built-in pool (`mtp`, `plain`, `auto`) then goes through `decide` (sampled, thinking and
   response_format overrides, thresholds, exploration, stickiness). A named pool takes its least
   busy healthy member (the conversation's holder when it is one): the operator named the
   instances, so the mtp-or-plain overrides do not apply; when no member is healthy, the least
   busy healthy instance of any pool serves it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from classifiers.features import Features
from classifiers.scores import Scores
from policies.arms import EMPTY_ARMS, ArmsState, choose_arm
from policies.decide import BackendState, Decision, RequestContext, decide, failover_order
from policies.learned import LearnedState
from policies.pools import BUILTIN_POOLS, PoolRoute
from policies.rewrite import Rewrite, rewritten_features
from policies.schema import Policy, Route
from policies.sessions import Held


@dataclass(frozen=True, slots=True)
class Routed:
    """The decision, and the pool, arm and rewrite that led to it."""

    decision: Decision
    pool: str  # the pool asked for: mtp, plain or a named pool
    arm: str  # the arm's key (pool plus rewrite label); the profile for unrewritten routes
    rewrite: Rewrite | None  # applied to the request before it goes upstream
    order: tuple[str, ...]  # backends to try, in order

    def as_dict(self) -> dict[str, Any]:
        """The record's `decision` object: `Decision.as_dict()` plus the pool and the arm."""
        return {**self.decision.as_dict(), "pool": self.pool, "arm": self.arm}


def decide_route(
    policy: Policy,
    features: Features,
    scores: Scores | None,
    backends: Sequence[BackendState],
    context: RequestContext | None = None,
    thresholds: Mapping[str, float] | None = None,
    *,
    endpoint: str = "chat",
    learned: LearnedState | None = None,
    arms: ArmsState = EMPTY_ARMS,
    draw: float | None = None,
    held: Held | None = None,
) -> Routed:
    """The arm and the instance for one request (see the module's docstring for the order)."""
    context = context or RequestContext()
    header = context.header_route or ""
    if policy.overrides.header and any(header in b.pools for b in backends):
        decision = place_in_pool(header, "header", "overrides.header", backends, None)
        return Routed(decision, header, header, None, pool_order(header, decision, backends))
    route, rule = (None, "")
    if scores is not None and not pinned_by_request(policy, context):
        route, rule = policy.class_route(scores.top_class, scores.lang, endpoint)
    if not isinstance(route, PoolRoute):
        decision = decide(policy, features, scores, backends, context, thresholds,
                          learned=learned, draw=draw, held=held,
                          route=(route, rule) if route is not None else None)
        return _unrewritten(decision, backends)
    assert scores is not None  # a class route needs the scores
    choice = choose_arm(
        route.choices, arms, scores.top_class, scores.lang,
        min_samples=policy.exploration.min_samples, rate=policy.exploration.rate, draw=draw,
    )
    arm = choice.arm
    sent = rewritten_features(features, arm.rewrite)
    if arm.builtin:
        decision = decide(
            policy, sent, scores, backends, context, thresholds, learned=learned,
            draw=choice.draw_left, held=held, route=(_route_word(arm.pool), rule),
        )
        decision = replace(decision, explored=decision.explored or choice.explored)
        return Routed(decision, decision.profile, arm.key, arm.rewrite,
                      tuple(failover_order(decision, backends)))
    reason = "arm" if len(route.choices) > 1 else "pool"
    decision = place_in_pool(arm.pool, reason, rule, backends, held, explored=choice.explored)
    return Routed(decision, arm.pool, arm.key, arm.rewrite, pool_order(arm.pool, decision, backends))


def pinned_by_request(policy: Policy, context: RequestContext) -> bool:
    """Whether a pin on the client's request (header, model alias, API key) decides: those win
    over every class route and are never rewritten."""
    o = policy.overrides
    header = (context.header_route or "").strip().lower()
    if o.header and header in BUILTIN_POOLS:
        return True
    if context.model.lower() in o.models:
        return True
    return bool(context.api_key_name and context.api_key_name in o.api_keys)


def place_in_pool(
    pool: str,
    reason: str,
    rule: str,
    backends: Sequence[BackendState],
    held: Held | None,
    *,
    explored: bool = False,
) -> Decision:
    """The conversation's holder when it is a healthy member, else the least busy healthy
    member; with none healthy, the least busy healthy instance of any pool."""
    members = [b for b in backends if pool in b.pools and b.healthy]
    holder = next((b for b in members if held is not None and b.name == held.backend), None)
    chosen = holder or _least_busy(members)
    if chosen is None:
        chosen = _least_busy(b for b in backends if b.healthy)
        if chosen is None:
            return Decision(pool, "", "no_healthy_backend", rule, explored)
        reason = f"{reason}+unhealthy_failover"
    elif holder is not None:
        reason = "sticky"
    return Decision(chosen.profile, chosen.name, reason, rule, explored)


def pool_order(pool: str, decision: Decision, backends: Sequence[BackendState]) -> tuple[str, ...]:
    """The chosen instance, the pool's other members, then the rest (by health and load)."""
    rest = sorted(
        (b for b in backends if b.name != decision.backend),
        key=lambda b: (pool not in b.pools, not b.healthy, b.inflight, b.name),
    )
    first = [decision.backend] if decision.backend else []
    return tuple(first + [b.name for b in rest])


def _unrewritten(decision: Decision, backends: Sequence[BackendState]) -> Routed:
    return Routed(decision, decision.profile, decision.profile, None,
                  tuple(failover_order(decision, backends)))


def _route_word(pool: str) -> Route:
    if pool in ("mtp", "plain"):
        return "mtp" if pool == "mtp" else "plain"
    return "auto"


def _least_busy(candidates: Iterable[BackendState]) -> BackendState | None:
    pool = sorted(candidates, key=lambda b: (b.inflight, b.name))
    return pool[0] if pool else None

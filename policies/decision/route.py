"""The decision's one entry point, `decide_route(ask, state)`: the pin, the allowed instances,
the arm (pool, rewrite), then the instance.

Pure: no I/O, no clock, no globals. In this order:
1. The pins on the client's request (`policies.decision.pins`: the `x-specroute-route`
   header, a model alias, an API key) and a classifier failure: `decide` as always, the
   request sent unchanged. A header naming a named pool sends the request there, unchanged.
2. The class route for the request's endpoint. A built-in route (`mtp | plain | auto`): `decide`
   as always, unchanged request.
3. A pool route: an arm is chosen among the route's own arms (`policies.decision.arm_choice`, from the
   learner's sums), and its rewrite
   is applied to the features, so that the rules after it judge the request as it will be sent.
   A built-in pool (`mtp`, `plain`, `auto`) then goes through `decide` (sampled, thinking and
   response_format overrides, then the soonest predicted finish). A named pool allows its
   healthy members only: the operator named the instances, so the mtp-or-plain overrides do not
   apply; when no member is healthy, every healthy instance is allowed.

Whatever allowed the instances, one rule picks among them: the soonest predicted finish
(`policies.decision.decide.place`, `policies.decision.finish`), for a pool of any size. The uniform `draw` first
serves the arm's exploration (`policies.decision.arm_choice`), and what is left of it becomes the finish rule's
Thompson draw.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from policies.decision.arm_choice import choose_arm
from policies.decision.ask import Ask, BackendState, State
from policies.decision.decide import Decision, decide, failover_order, place, route_rule
from policies.decision.finish import normal_draw
from policies.decision.pins import request_pin
from policies.policyfile.pools import Arm, PoolRoute
from policies.policyfile.rewrite import Rewrite, rewritten_features
from policies.policyfile.words import Route


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


def decide_route(ask: Ask, state: State) -> Routed:
    """The one entry point: the arm and the instance for one request (the order is in the
    module's docstring): the client's pin, the class route, the arm, the soonest finish."""
    policy, scores, backends = state.policy, ask.scores, state.backends
    # the named pools matter only to a header naming one: not gathered for every request
    pin = request_pin(policy, ask.context, state.pools if ask.context.header_route else ())
    if pin is not None and pin.pool:
        decision = place_in_pool(ask, state, pin.target, (pin.reason, pin.rule),
                                 z=normal_draw(ask.draw))
        return Routed(decision, pin.target, pin.target, None,
                      pool_order(pin.target, decision, backends))
    route, rule = (None, "")
    if scores is not None and pin is None:
        route, rule = policy.class_route(scores.top_class, scores.lang, ask.endpoint)
    if not isinstance(route, PoolRoute):
        decision = decide(ask, state, z=normal_draw(ask.draw),
                          route=(route, rule) if route is not None else None)
        return _unrewritten(decision, backends)
    assert scores is not None  # a class route needs the scores
    choice = choose_arm(
        route.choices, state.arms, scores.top_class, scores.lang,
        min_samples=policy.exploration.min_samples, rate=policy.exploration.arms_rate,
        draw=ask.draw,
    )
    arm, z = choice.arm, normal_draw(choice.draw_left)
    sent = ask.sending(rewritten_features(ask.features, arm.rewrite))
    if len(choice.variant) > 1:
        return place_variant(sent, state, choice.variant, rule, z=z, explored=choice.explored)
    if arm.builtin:
        decision = decide(sent, state, z=z, route=(_route_word(arm.pool), rule))
        decision = replace(decision, explored=decision.explored or choice.explored)
        return Routed(decision, decision.profile, arm.key, arm.rewrite,
                      tuple(failover_order(decision, backends)))
    reason = "arm" if len(route.choices) > 1 else "pool"
    decision = place_in_pool(sent, state, arm.pool, (reason, rule), z=z)
    decision = replace(decision, explored=decision.explored or choice.explored)
    return Routed(decision, arm.pool, arm.key, arm.rewrite, pool_order(arm.pool, decision, backends))


def place_variant(
    sent: Ask, state: State, variant: Sequence[Arm], rule: str, *, z: float, explored: bool
) -> Routed:
    """Arms that send one request to different pools: every instance one of them allows
    competes on the soonest predicted finish, each priced by its speculation config for this
    request, as under `auto`; the arm is the first whose pool holds the instance chosen."""
    allows = [_allows(arm, sent, state) for arm in variant]
    decision = place(sent, state, lambda b: any(a(b) for a in allows), ("arm", rule), z=z,
                     unserved=variant[0].pool)
    decision = replace(decision, explored=decision.explored or explored)
    chosen = next((b for b in state.backends if b.name == decision.backend), None)
    arm = next((a for a, ok in zip(variant, allows) if chosen is not None and ok(chosen)),
               variant[0])
    order = failover_order(decision, state.backends, near=lambda b: any(a(b) for a in allows))
    return Routed(decision, arm.pool, arm.key, arm.rewrite, tuple(order))


def _allows(arm: Arm, sent: Ask, state: State) -> Callable[[BackendState], bool]:
    """Which instances an arm's pool allows for this request: a built-in one by the policy's
    overrides as `decide` applies them (sampled, thinking, response_format), a named one its
    members."""
    if not arm.builtin:
        return lambda b: arm.pool in b.pools
    pin, _, _ = route_rule(state.policy, sent, route=(_route_word(arm.pool), ""))
    return lambda b: pin is None or b.profile == pin


def place_in_pool(ask: Ask, state: State, pool: str, why: tuple[str, str], *, z: float) -> Decision:
    """The healthy member of a named pool that will finish the request soonest (the queue on
    it, the prefix it holds for this conversation, its pace for this request); with no member
    healthy, the soonest of every healthy instance."""
    return place(ask, state, lambda b: pool in b.pools, why, z=z, unserved=pool)


def pool_order(pool: str, decision: Decision, backends: Sequence[BackendState]) -> tuple[str, ...]:
    """The chosen instance, then the rest, healthy first, the pool's other members next."""
    return tuple(failover_order(decision, backends, near=lambda b: pool in b.pools))


def _unrewritten(decision: Decision, backends: Sequence[BackendState]) -> Routed:
    """The request as sent, to the instance chosen: its arm is that instance's speculation
    config (a built-in pool: `plain`, `mtp`, `ngram-simple`, ...)."""
    return Routed(decision, decision.profile, decision.config or decision.profile, None,
                  tuple(failover_order(decision, backends)))


def _route_word(pool: str) -> Route:
    if pool in ("mtp", "plain"):
        return "mtp" if pool == "mtp" else "plain"
    return "auto"

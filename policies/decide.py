"""The routing decision: which speculation profile, and which backend instance, for one request.

Pure: no I/O, no clock, no globals. Everything the decision depends on is an argument:
the policy, the request's features and scores, the backends' health and load, the learned
state, a uniform random draw for exploration, and where the conversation's prefix is held.
Rules are checked in a fixed order (header, model alias, API key, sampling, thinking,
response_format, class route); the first that applies wins and is named in `Decision.rule`,
with a short `reason` code for logs and headers. Only class routes (`auto` or pinned) are
subject to stickiness, and only `auto` routes to exploration; overrides are pins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from classifiers.features import Features
from classifiers.scores import Scores
from policies.explore import cold_arm, explore
from policies.learned import Belief, LearnedState
from policies.schema import Policy, Profile, Route
from policies.sessions import Held, expected_remaining_tokens, switch_verdict

DEFAULT_THRESHOLD: Final = 0.5
PROFILES: Final = ("mtp", "plain")
# Reasons that come from the class route (not an override): stickiness may overrule them.
CLASS_REASONS: Final = frozenset({"class", "learned", "p_spec", "classifier_error"})
# Reasons that come from an `auto` route: exploration may overrule them.
AUTO_REASONS: Final = frozenset({"learned", "p_spec"})


@dataclass(frozen=True, slots=True)
class BackendState:
    """What the decision needs to know about one backend instance."""

    name: str
    profile: str
    healthy: bool = True
    inflight: int = 0
    pools: frozenset[str] = frozenset()  # the named pools it belongs to (issue 14)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Request facts that are not features: routing hints from headers and credentials."""

    header_route: str | None = None  # x-specroute-route: mtp | plain | auto
    model: str = ""
    api_key_name: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    profile: str  # the profile asked for by the rules
    backend: str  # the instance chosen ("" when no backend is healthy)
    reason: str  # short code: header, model, api_key, sampled, thinking, ...
    rule: str  # the policy path that decided, e.g. "routes.code"
    explored: bool = False
    threshold: float | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "profile": self.profile,
            "backend": self.backend,
            "reason": self.reason,
            "rule": self.rule,
            "explored": self.explored,
            "threshold": self.threshold,
        }


def decide(
    policy: Policy,
    features: Features,
    scores: Scores | None,
    backends: Sequence[BackendState],
    context: RequestContext = RequestContext(),
    thresholds: Mapping[str, float] | None = None,
    *,
    learned: LearnedState | None = None,
    draw: float | None = None,
    held: Held | None = None,
    route: tuple[Route, str] | None = None,
) -> Decision:
    """Pick a profile by the policy's rules (learned thresholds priced for the current load),
    maybe explore (`draw`: uniform in [0, 1), None: never), keep the conversation where its
    prefix is `held` unless switching pays, then the least busy healthy backend. `route`
    (route, rule), when given, stands for the class route (`policies.route` passes a pool
    route's arm)."""
    queues = _queues(backends)
    profile, reason, rule, threshold = choose_profile(
        policy, features, scores, context, thresholds, learned=learned, queues=queues,
        route=route,
    )
    belief = _belief(learned, scores)
    explored = False
    if draw is not None and reason in AUTO_REASONS and scores is not None:
        cold = cold_arm(learned, profile, policy.exploration.min_samples)
        choice = explore(profile, belief, scores.p_spec, policy.exploration.rate, draw, cold=cold)
        profile, explored = choice.profile, choice.explored
    if held is not None and policy.stickiness.enabled and reason in CLASS_REASONS:
        holder = _stick(held, profile, features, scores, backends, learned, belief)
        if holder is not None and held.profile == profile:
            return Decision(profile, holder.name, reason, rule, explored, threshold)
        if holder is not None:
            return Decision(held.profile, holder.name, "sticky", rule, False, threshold)
    return place(profile, reason, rule, backends, threshold=threshold, explored=explored)


def choose_profile(
    policy: Policy,
    features: Features,
    scores: Scores | None,
    context: RequestContext = RequestContext(),
    thresholds: Mapping[str, float] | None = None,
    *,
    learned: LearnedState | None = None,
    queues: tuple[int, int] = (0, 0),
    route: tuple[Route, str] | None = None,
) -> tuple[Profile, str, str, float | None]:
    """(profile, reason, rule, threshold) by the policy's rules, in their fixed order.

    For an `auto` route the threshold is the learned one when the learned state trusts its
    evidence (priced for `queues`: requests ahead on the mtp and plain instances), else the
    one in `thresholds` ("class/lang" or "class"), else DEFAULT_THRESHOLD."""
    o = policy.overrides
    header = (context.header_route or "").strip().lower()
    if o.header and header in PROFILES:
        return _profile(header), "header", "overrides.header", None
    model = context.model.lower()
    if model in o.models:
        return o.models[model], "model", f"overrides.models.{model}", None
    if context.api_key_name and context.api_key_name in o.api_keys:
        name = context.api_key_name
        return o.api_keys[name], "api_key", f"overrides.api_keys.{name}", None
    temperature = features.temperature if features.temperature >= 0 else policy.assume.temperature
    if o.sampled is not None and temperature > 0:
        return o.sampled, "sampled", "overrides.sampled", None
    thinking = features.thinking or (features.thinking_unset and policy.assume.thinking)
    if o.thinking is not None and thinking:
        return o.thinking, "thinking", "overrides.thinking", None
    fmt = _response_format_of(features)
    if fmt and fmt in o.response_format:
        return o.response_format[fmt], "response_format", f"overrides.response_format.{fmt}", None
    if scores is None:
        return policy.fallback, "classifier_error", "fallback", None
    class_route, rule = route or policy.route_for(scores.top_class, scores.lang)
    if class_route != "auto":
        return class_route, "class", rule, None
    belief = _belief(learned, scores)
    if belief is not None and belief.trusted:
        threshold, reason = belief.threshold_at(*queues), "learned"
    else:
        given = thresholds or {}
        key = f"{scores.top_class}/{scores.lang}"
        threshold = given.get(key, given.get(scores.top_class, DEFAULT_THRESHOLD))
        reason = "learned" if key in given or scores.top_class in given else "p_spec"
    profile: Profile = "mtp" if scores.p_spec >= threshold else "plain"
    return profile, reason, rule, threshold


def place(
    profile: str,
    reason: str,
    rule: str,
    backends: Sequence[BackendState],
    *,
    threshold: float | None = None,
    explored: bool = False,
) -> Decision:
    """The least busy healthy instance of `profile`; the other profile's if none is healthy."""
    chosen = _least_busy(b for b in backends if b.profile == profile and b.healthy)
    if chosen is None:
        chosen = _least_busy(b for b in backends if b.healthy)
        if chosen is None:
            return Decision(profile, "", "no_healthy_backend", rule, explored, threshold)
        reason = f"{reason}+unhealthy_failover"
    return Decision(profile, chosen.name, reason, rule, explored, threshold)


def failover_order(decision: Decision, backends: Sequence[BackendState]) -> list[str]:
    """Backends to try in order: the chosen one, then the rest by health, profile and load."""
    rest = sorted(
        (b for b in backends if b.name != decision.backend),
        key=lambda b: (not b.healthy, b.profile != decision.profile, b.inflight, b.name),
    )
    first = [decision.backend] if decision.backend else []
    return first + [b.name for b in rest]


def _queues(backends: Sequence[BackendState]) -> tuple[int, int]:
    """Requests ahead on the least busy healthy instance of each profile."""

    def ahead(profile: str) -> int:
        busy = [b.inflight for b in backends if b.profile == profile and b.healthy]
        return min(busy) if busy else 0

    return ahead("mtp"), ahead("plain")


def _belief(learned: LearnedState | None, scores: Scores | None) -> Belief | None:
    if learned is None or scores is None:
        return None
    return learned.belief(scores.top_class, scores.lang)


def _stick(
    held: Held,
    wanted: str,
    features: Features,
    scores: Scores | None,
    backends: Sequence[BackendState],
    learned: LearnedState | None,
    belief: Belief | None,
) -> BackendState | None:
    """The instance holding the prefix when the conversation should stay there, else None."""
    holder = next((b for b in backends if b.name == held.backend and b.healthy), None)
    if holder is None:
        return None
    if held.profile == wanted:
        return holder
    cost = learned.cost if learned is not None else None
    prefill = cost.prefill_ms_per_token.get(wanted) if cost is not None else None
    if cost is None or prefill is None or belief is None or scores is None:
        return holder  # no measured basis for a gain: a switch would only cost
    verdict = switch_verdict(
        held_profile=held.profile,
        wanted_profile=wanted,
        speedup=belief.bin_for(scores.p_spec).speedup,
        prompt_tokens=features.prompt_tokens,
        remaining_tokens=expected_remaining_tokens(held.turns, cost.mean_completion_tokens),
        t_plain_ms=cost.t_plain_ms,
        prefill_ms_per_token=prefill,
    )
    return None if verdict.switch else holder


def _least_busy(candidates: Iterable[BackendState]) -> BackendState | None:
    pool = sorted(candidates, key=lambda b: (b.inflight, b.name))
    return pool[0] if pool else None


def _response_format_of(features: Features) -> str:
    return "json" if features.json_mode else ""


def _profile(value: str) -> Profile:
    return "mtp" if value == "mtp" else "plain"

"""The routing decision: which speculation profile, and which backend instance, for one request.

Pure: no I/O, no clock, no globals. Everything the decision depends on is an argument:
the policy, the request's features and scores, the backends' health and load, the learned
thresholds. Rules are checked in a fixed order (header, model alias, API key, sampling,
thinking, response_format, class route); the first that applies wins and is named in
`Decision.rule`, with a short `reason` code for logs and headers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from classifiers.features import Features
from classifiers.scores import Scores
from policies.schema import Policy, Profile

DEFAULT_THRESHOLD: Final = 0.5
PROFILES: Final = ("mtp", "plain")


@dataclass(frozen=True, slots=True)
class BackendState:
    """What the decision needs to know about one backend instance."""

    name: str
    profile: str
    healthy: bool = True
    inflight: int = 0


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
) -> Decision:
    """Pick a profile by the policy's rules, then the least busy healthy backend for it."""
    profile, reason, rule, threshold = choose_profile(policy, features, scores, context, thresholds)
    return place(profile, reason, rule, backends, threshold=threshold)


def choose_profile(
    policy: Policy,
    features: Features,
    scores: Scores | None,
    context: RequestContext = RequestContext(),
    thresholds: Mapping[str, float] | None = None,
) -> tuple[Profile, str, str, float | None]:
    """(profile, reason, rule, threshold) by the policy's rules, in their fixed order."""
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
    route, rule = policy.route_for(scores.top_class, scores.lang)
    if route != "auto":
        return route, "class", rule, None
    key = f"{scores.top_class}/{scores.lang}"
    threshold = (thresholds or {}).get(key, (thresholds or {}).get(scores.top_class, DEFAULT_THRESHOLD))
    profile: Profile = "mtp" if scores.p_spec >= threshold else "plain"
    return profile, "learned" if thresholds else "p_spec", rule, threshold


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


def _least_busy(candidates: Iterable[BackendState]) -> BackendState | None:
    pool = sorted(candidates, key=lambda b: (b.inflight, b.name))
    return pool[0] if pool else None


def _response_format_of(features: Features) -> str:
    return "json" if features.json_mode else ""


def _profile(value: str) -> Profile:
    return "mtp" if value == "mtp" else "plain"

"""Placing one request once its route is known: the policy's rules in their fixed order, then
the soonest predicted finish among the instances they allow (`decide_route` in
`policies.decision.route` is the entry point that calls it).

Pure: no I/O, no clock, no globals. Everything the decision depends on is in its two
arguments (`policies.decision.ask`): the request (`Ask`: features, scores, the client's hints,
where the conversation's prefix is held, a random draw) and the state (`State`: the policy,
the route model, the backends' health and in-flight work, the arms' sums).

Rules are checked in a fixed order (header, model alias, API key, sampling, thinking,
response_format, class route); the first that pins a profile wins and is named in
`Decision.rule`, with a short `reason` code for logs and headers. Then one rule places the
request, pinned or not: the healthy instance (of the pinned profile, when one is pinned and
healthy) that will finish it soonest (`policies.decision.finish`). It replaces thresholds, stickiness
switches and load pricing: the queue, the cached prefix and the speedup are all terms of the
predicted finish. `place` is that rule over any set of allowed instances: `policies.decision.route` uses
it for a named pool.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Final, NamedTuple

from classifiers.copying import COPY_NAMES
from classifiers.features import Features
from classifiers.scores import Scores
from policies.decision.ask import Ask, BackendState, State
from policies.decision.batching import joined_batch
from policies.decision.finish import (
    THIN_BELOW,
    Candidate,
    exploration_bound,
    soonest,
    spread_draws,
)
from policies.decision.pins import request_pin
from policies.decision.sessions import Held
from policies.learner.routemodel import PLAIN_CONFIG, RouteModel
from policies.learner.speedup import INPUT_FEATURES, MTP_CONFIG, Prediction, Vector, read_inputs
from policies.policyfile.schema import Policy
from policies.policyfile.words import Profile, Route

AUTO_REASON: Final = "finish"  # an `auto` route: the soonest predicted finish decided


@dataclass(frozen=True, slots=True)
class Decision:
    profile: str  # the profile of the chosen instance (the pinned one when none is healthy)
    backend: str  # the instance chosen ("" when no backend is healthy)
    reason: str  # short code: header, model, api_key, sampled, thinking, ..., finish
    rule: str  # the policy path that decided, e.g. "routes.code"
    explored: bool = False  # the Thompson draw chose another instance than the posterior mean
    service_ms: float = 0.0  # predicted prefill + decode on the chosen instance
    queue_ms: float = 0.0  # predicted work queued ahead of it there
    tokens: float = 0.0  # expected completion tokens
    tokens_sd: float = 0.0  # sd of their log (0: not predicted): how far they may stray
    # predicted prefill + decode there at the request's max_tokens (0: no cap): with
    # `tokens_sd`, what the pool prices its time left by once it runs (finish.time_left)
    most_ms: float = field(default=0.0, compare=False)
    # predicted speedup for this request of the chosen instance's speculation config (of the
    # likeliest to pay among the candidates' when a plain instance was chosen)
    speedup: float | None = None
    speedup_sd: float | None = None  # its uncertainty (sd of the log-speedup)
    # the route model's probability that speculation pays for this request (speedup > 1): the
    # one `p_spec` there is, a view of the prediction that decided
    p_spec: float | None = None
    finish_ms: dict[str, float] = field(default_factory=dict)  # instance -> predicted finish
    # instance -> what this request would have lost had that instance been taken (not logged:
    # the proxy's pool keeps the recent ones, the price of making a request go elsewhere)
    losses_ms: dict[str, float] = field(default_factory=dict, compare=False)
    config: str = ""  # the chosen instance's speculation config (`plain`, `mtp`, `ngram-simple`..)
    pace_ms: float = 0.0  # its predicted ms per token there alone (before its batch's cost)
    batch: int = 1  # the batch it was predicted to decode in there, itself included
    # instance -> the batch it would decode in there, where that is above 1 (not logged)
    batches: dict[str, int] = field(default_factory=dict, compare=False)
    speedups: dict[str, float] = field(default_factory=dict)  # config -> predicted speedup
    # the route model's inputs the speedups and the length were predicted from (None: none
    # were), packed; not logged: the record carries them to the learner, which need not build
    # them again
    inputs: array[float] | None = field(default=None, compare=False, repr=False)

    def as_dict(self) -> dict[str, object]:
        return {
            "profile": self.profile,
            "backend": self.backend,
            "reason": self.reason,
            "rule": self.rule,
            "explored": self.explored,
            "service_ms": round(self.service_ms, 1),
            "queue_ms": round(self.queue_ms, 1),
            "tokens": round(self.tokens, 1),
            "tokens_sd": round(self.tokens_sd, 3),
            "speedup": None if self.speedup is None else round(self.speedup, 4),
            "speedup_sd": None if self.speedup_sd is None else round(self.speedup_sd, 4),
            "p_spec": None if self.p_spec is None else round(self.p_spec, 4),
            "finish_ms": {k: round(v, 1) for k, v in self.finish_ms.items()},
            "config": self.config,
            "pace_ms": round(self.pace_ms, 3),
            "batch": self.batch,
            "speedups": {k: round(v, 4) for k, v in self.speedups.items()},
        }


def decide(
    ask: Ask, state: State, *, z: float = 0.0, route: tuple[Route, str] | None = None
) -> Decision:
    """Pin a profile by the policy's rules (or not: `auto`), then the soonest predicted finish
    among the healthy instances allowed. `z`: a standard normal draw for Thompson sampling
    (0: the posterior median, no exploration). `route` (route, rule), when given, stands for
    the class route (`policies.decision.route` passes a pool route's built-in arm)."""
    pin, reason, rule = route_rule(state.policy, ask, route=route)
    return place(ask, state, lambda b: pin is None or b.profile == pin, (reason, rule), z=z,
                 unserved=pin or state.policy.fallback)


def place(
    ask: Ask,
    state: State,
    allowed: Callable[[BackendState], bool],
    why: tuple[str, str],
    *,
    z: float,
    unserved: str,
) -> Decision:
    """The healthy instance `allowed` that will finish the request soonest; when none allowed
    is healthy, the soonest of all healthy ones (`+unhealthy_failover`). `why`: the (reason,
    rule) that allowed them; `unserved`: the decision's profile when no instance is healthy."""
    policy, model, features, scores = state.policy, state.model, ask.features, ask.scores
    reason, rule = why
    healthy = [b for b in state.backends if b.healthy]
    eligible = [b for b in healthy if allowed(b)]
    if not eligible and healthy:
        eligible, reason = healthy, f"{reason}+unhealthy_failover"
    configs = {b.config for b in eligible} - {PLAIN_CONFIG}
    x = request_inputs(features, scores)
    speedups = predict_speedups(x if _greedy_decoding(policy, features) else None, model,
                                configs, z)
    tokens = model.completion_tokens(x, features.max_tokens)
    held = ask.held
    sticky = held if held is not None and policy.stickiness.enabled else None
    candidates = [candidate(b, features, model, speedups.get(b.config), sticky) for b in eligible]
    bound = exploration_bound(policy.exploration.max_regret, tokens, model.typical_tokens)
    choice = soonest(candidates, tokens, max_regret=bound)
    if choice is None:
        return Decision(unserved, "", "no_healthy_backend", rule)
    chosen = choice.candidate
    shown = (_shown_speedup(speedups, chosen.config) if speedups
             else predict_speedup(policy, features, scores, model))
    return Decision(
        profile=chosen.profile, backend=chosen.name, reason=reason, rule=rule,
        explored=choice.explored, service_ms=chosen.lifelong_ms(tokens), queue_ms=chosen.queue_ms,
        tokens=tokens, tokens_sd=model.completion_spread(x),
        most_ms=chosen.lifelong_ms(features.max_tokens) if features.max_tokens > 0 else 0.0,
        speedup=shown.speedup, speedup_sd=shown.sd, p_spec=shown.pays,
        finish_ms=dict(choice.finish_ms), losses_ms=dict(choice.losses_ms), config=chosen.config,
        pace_ms=chosen.pace_ms, batch=chosen.batch,
        batches={c.name: c.batch for c in candidates if c.batch > 1},
        speedups={k: d.prediction.speedup for k, d in sorted(speedups.items())},
        inputs=array("d", x.tobytes()),
    )


def _shown_speedup(speedups: Mapping[str, Drawn], chosen: str) -> Prediction:
    """The prediction a decision logs: the chosen config's, or with a plain instance chosen
    the speculating config likeliest to pay (with none among the candidates, the caller logs
    depth-1 speculation's, as before there were configs)."""
    if chosen in speedups:
        return speedups[chosen].prediction
    return max((d.prediction for d in speedups.values()), key=lambda p: p.pays)


def route_rule(
    policy: Policy, ask: Ask, *, route: tuple[Route, str] | None = None
) -> tuple[Profile | None, str, str]:
    """(pinned profile or None for `auto`, reason, rule) by the policy's rules in order.
    `route` (route, rule), when given, stands for the class route."""
    features, scores = ask.features, ask.scores
    o = policy.overrides
    pin = request_pin(policy, ask.context)
    if pin is not None:
        return _profile(pin.target), pin.reason, pin.rule
    if o.sampled is not None and _sampled(policy, features):
        return o.sampled, "sampled", "overrides.sampled"
    if o.thinking is not None and _thinking(policy, features):
        return o.thinking, "thinking", "overrides.thinking"
    fmt = _response_format_of(features)
    if fmt and fmt in o.response_format:
        return o.response_format[fmt], "response_format", f"overrides.response_format.{fmt}"
    if scores is None:
        return policy.fallback, "classifier_error", "fallback"
    class_route, rule = route or policy.route_for(scores.top_class, scores.lang)
    if class_route != "auto":
        return class_route, "class", rule
    return None, AUTO_REASON, rule


class Drawn(NamedTuple):
    """One config's predicted log-speedup for a request, and its Thompson draw's speedup."""

    prediction: Prediction
    drawn: float


def predict_speedup(
    policy: Policy, features: Features, scores: Scores | None, model: RouteModel,
    config: str = MTP_CONFIG,
) -> Prediction:
    """The request's predicted log-speedup on an instance of `config` (greedy or not)."""
    if not _greedy_decoding(policy, features):  # reads no input: none built
        return model.sampled_speedup(config)
    return model.speedup(request_inputs(features, scores), config)


def request_inputs(features: Features, scores: Scores | None) -> Vector:
    """The route model's inputs for the request, from its features and class scores as the
    decision log records them (so the learner, reading the record, reads the same)."""
    return read_inputs(_INPUT_VALUES(features), scores.logged_scores() if scores else None)


# The features the inputs read, straight from `Features`: the values `as_dict` gives the
# record, without building the whole dict on every decision.
_INPUT_VALUES: Final = attrgetter(*(f"copy.{name}" if name in COPY_NAMES else name
                                    for name in INPUT_FEATURES))


def predict_speedups(
    x: Vector | None, model: RouteModel, configs: Iterable[str], z: float,
) -> dict[str, Drawn]:
    """Each speculating config's predicted log-speedup for the request and its draw: one
    standard normal draw per config, each from `z` (the first config's is `z` itself), so
    that configs are explored independently of each other. `x`: the request's inputs when it
    decodes greedily; None, it is sampled or thinking (one figure per config, whatever the
    request)."""
    names = tuple(sorted(configs))
    if not names:
        return {}
    if x is not None:
        predictions = model.speedups(x, names)
    else:
        predictions = [model.sampled_speedup(config) for config in names]
    draws = spread_draws(z, len(names))
    return {config: Drawn(p, p.sample(draw))
            for config, p, draw in zip(names, predictions, draws, strict=True)}


def candidate(
    b: BackendState,
    features: Features,
    model: RouteModel,
    speedup: Drawn | None,
    held: Held | None,
) -> Candidate:
    """One instance's terms of the predicted finish for this request (`speedup`: its config's,
    None on a plain instance)."""
    cached = min(held.prompt_tokens, features.prompt_tokens) if held and held.backend == b.name else 0
    prefill = max(0, features.prompt_tokens - cached) * model.prefill_ms_per_token(b.config)
    t_plain = model.t_plain_ms
    if speedup is not None:
        median, drawn = t_plain / speedup.prediction.speedup, t_plain / speedup.drawn
    else:
        median = drawn = t_plain
    work = b.work()
    spread = speedup.prediction.sd if speedup and speedup.prediction.unlearned else 0.0
    batch, factor, lifelong, slowdown = _batch_terms(b, work.requests, model)
    return Candidate(b.name, b.profile, work.work_ms, prefill, median * factor, drawn * factor,
                     waiting=work.requests, thin=model.measured(b.config) < THIN_BELOW,
                     unlearned_sd=spread,
                     tie_rank=b.tie_rank, contended=b.contended, config=b.config,
                     behind=b.behind, slots=b.slots, serving=work.serving, slowdown=slowdown,
                     batch=batch, pace_ms=median, lifelong_ms_per_token=median * lifelong)


def _batch_terms(b: BackendState, requests: int,
                 model: RouteModel) -> tuple[int, float, float, float]:
    """(the batch a request would decode in on `b`, its per-token time there over its time
    alone, the same at the batch it is expected to run in over its life, how much slower the
    requests served there now decode once it joins): one at a time, (1, 1, 1, 1). The choice
    compares the batches as they are (where the next requests go is the choices still to
    come); the prediction the request carries is its life's (what the batch then does)."""
    if b.slots <= 1:
        return 1, 1.0, 1.0, 1.0
    batch = joined_batch(requests, b.slots)
    curve = model.batch_curve(b.name)
    factor = curve.factor(batch)
    slowdown = factor / curve.factor(batch - 1) if batch > 1 else 1.0
    return batch, factor, curve.joining(batch), slowdown


def failover_order(
    decision: Decision,
    backends: Sequence[BackendState],
    near: Callable[[BackendState], bool] | None = None,
) -> list[str]:
    """Backends to try in order: the chosen one, then the rest, healthy first, those `near` the
    choice next (by default: of its profile; for a named pool: its members), least loaded."""
    near = near or (lambda b: b.profile == decision.profile)
    rest = sorted(
        (b for b in backends if b.name != decision.backend),
        key=lambda b: (not b.healthy, not near(b), b.inflight, b.name),
    )
    first = [decision.backend] if decision.backend else []
    return first + [b.name for b in rest]


def _sampled(policy: Policy, features: Features) -> bool:
    temperature = features.temperature if features.temperature >= 0 else policy.assume.temperature
    return temperature > 0


def _thinking(policy: Policy, features: Features) -> bool:
    return features.thinking or (features.thinking_unset and policy.assume.thinking)


def _greedy_decoding(policy: Policy, features: Features) -> bool:
    """Greedy and not thinking: where speculation can pay (ds4 speculates nothing else)."""
    return not _sampled(policy, features) and not _thinking(policy, features)


def _response_format_of(features: Features) -> str:
    return "json" if features.json_mode else ""


def _profile(value: str) -> Profile:
    return "mtp" if value == "mtp" else "plain"

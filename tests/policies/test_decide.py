"""The pure decision: rule order, learned thresholds under load, exploration, stickiness."""

from __future__ import annotations

from dataclasses import replace

import pytest

from classifiers.features import Features
from classifiers.scores import Scores
from policies.decide import BackendState, Decision, RequestContext, decide, failover_order
from policies.learn import learn
from policies.learned import LearnedState
from policies.schema import Exploration, Policy
from policies.sessions import Held
from tests.policies import synthetic

FEATURES = Features(
    n_tools=0, tool_schema_chars=0, tool_choice_required=False, tool_choice_none=False,
    last_role_tool=False, last_role_assistant=False, history_has_tool=False, n_messages=1,
    code_fences=0, code_line_share=0.0, cjk_share=0.0, json_mode=False, temperature=0.0,
    greedy=True, thinking=False, thinking_unset=True, max_tokens=0, prompt_tokens=100,
    last_user_tokens=20, system_chars=0,
)
BACKENDS = (BackendState("mtp-0", "mtp"), BackendState("plain-0", "plain"))
POLICY = Policy(
    routes={"agent": "auto", "code": "auto", "technical": "auto", "prose": "auto", "chat": "plain"},
    languages={"zh": {"chat": "auto"}},
)


def _scores(cls: str, p_spec: float, lang: str = "en") -> Scores:
    return Scores(cls, lang, {cls: 1.0}, p_spec)


def _gb10_state() -> LearnedState:
    obs = list(synthetic.observations(synthetic.GB10, 2000, seed=11))
    with_prefill = [replace(o, prompt_tokens=500, ttft_ms=500.0) for o in obs]
    return learn(with_prefill)


GB10_STATE = _gb10_state()
# Both arms well sampled on prose alone: code has no belief of its own yet.
WARM_PROSE_ONLY = learn(o for o in synthetic.observations(synthetic.GB10, 400, seed=3)
                        if o.cls == "prose")


@pytest.mark.parametrize(
    ("features", "context", "profile", "reason"),
    [
        (FEATURES, RequestContext(header_route="mtp"), "mtp", "header"),
        (FEATURES, RequestContext(model="deepseek-reasoner"), "plain", "model"),
        (replace(FEATURES, temperature=0.7, greedy=False), RequestContext(), "plain", "sampled"),
        (replace(FEATURES, thinking=True), RequestContext(), "plain", "thinking"),
        (FEATURES, RequestContext(), "mtp", "learned"),
    ],
)
def test_overrides_come_before_the_learned_route(
    features: Features, context: RequestContext, profile: str, reason: str
) -> None:
    policy = replace_models(POLICY, {"deepseek-reasoner": "plain"})
    d = decide(policy, features, _scores("code", 0.8), BACKENDS, context, learned=GB10_STATE)
    assert (d.profile, d.reason) == (profile, reason)


def replace_models(policy: Policy, models: dict[str, str]) -> Policy:
    return policy.model_copy(
        update={"overrides": policy.overrides.model_copy(update={"models": models})}
    )


@pytest.mark.parametrize(
    ("cls", "lang", "p_spec", "profile"),
    [
        ("agent", "en", 0.1, "mtp"),  # the learned threshold, not the p_spec prior, decides
        ("code", "en", 0.3, "mtp"),
        ("technical", "en", 0.6, "mtp"),
        ("prose", "en", 0.9, "plain"),
        ("chat", "zh", 0.9, "plain"),
    ],
)
def test_learned_thresholds_route_gb10_classes(
    cls: str, lang: str, p_spec: float, profile: str
) -> None:
    d = decide(POLICY, FEATURES, _scores(cls, p_spec, lang), BACKENDS, learned=GB10_STATE)
    assert (d.profile, d.reason) == (profile, "learned")
    assert d.threshold == GB10_STATE.beliefs[f"{cls}/{lang}"].threshold


def test_without_learned_state_the_default_threshold_applies() -> None:
    d = decide(POLICY, FEATURES, _scores("prose", 0.6), BACKENDS)
    assert (d.profile, d.reason, d.threshold) == ("mtp", "p_spec", 0.5)
    d = decide(POLICY, FEATURES, _scores("prose", 0.6), BACKENDS, thresholds={"prose": 0.7})
    assert (d.profile, d.reason, d.threshold) == ("plain", "learned", 0.7)


@pytest.mark.parametrize(
    ("mtp_inflight", "plain_inflight", "cls", "profile"),
    [
        (0, 0, "agent", "mtp"),
        (1, 0, "agent", "plain"),
        (0, 1, "prose", "mtp"),
        (2, 2, "agent", "mtp"),
    ],
)
def test_load_is_priced_in(mtp_inflight: int, plain_inflight: int, cls: str, profile: str) -> None:
    backends = (
        BackendState("mtp-0", "mtp", inflight=mtp_inflight),
        BackendState("plain-0", "plain", inflight=plain_inflight),
    )
    d = decide(POLICY, FEATURES, _scores(cls, 0.8), backends, learned=GB10_STATE)
    assert d.profile == profile


@pytest.mark.parametrize(
    ("policy", "learned", "draw", "explored"),
    [
        # cold start: the machine has no plain samples, half goes there
        (POLICY, None, 0.49, True),
        (POLICY, None, 0.51, False),
        # both arms sampled, nothing known about code: the full 5% budget
        (POLICY, WARM_PROSE_ONLY, 0.04, True),
        (POLICY, WARM_PROSE_ONLY, 0.06, False),  # outside the 5% budget
        (POLICY.model_copy(update={"exploration": Exploration(rate=0.0)}), None, 0.0, False),  # off
        (POLICY, GB10_STATE, 0.0, False),  # conclusive evidence: no exploration
        (POLICY.model_copy(update={"routes": {"code": "mtp"}}), None, 0.0, False),  # pinned
    ],
)
def test_exploration_only_on_auto_routes_with_doubt(
    policy: Policy, learned: LearnedState | None, draw: float, explored: bool
) -> None:
    d = decide(policy, FEATURES, _scores("code", 0.8), BACKENDS, learned=learned, draw=draw)
    assert d.explored is explored
    assert d.profile == ("plain" if explored else "mtp")


def test_exploration_never_overrides_a_header() -> None:
    context = RequestContext(header_route="mtp")
    d = decide(POLICY, FEATURES, _scores("code", 0.8), BACKENDS, context, draw=0.0)
    assert (d.profile, d.explored) == ("mtp", False)


@pytest.mark.parametrize(
    ("held", "prompt_tokens", "backend", "reason"),
    [
        (Held("mtp-0", "mtp", 3, 400, 0.0), 400, "mtp-0", "learned"),  # already where it wants
        # prose wants plain; a 30k-token prompt costs more to re-prefill than the rest saves
        (Held("mtp-0", "mtp", 1, 30_000, 0.0), 30_000, "mtp-0", "sticky"),
        # a short prompt in a long conversation: switching pays
        (Held("mtp-0", "mtp", 8, 50, 0.0), 50, "plain-0", "learned"),
        (Held("gone-0", "mtp", 8, 50, 0.0), 30_000, "plain-0", "learned"),  # holder is gone
    ],
)
def test_stickiness_keeps_a_conversation_unless_switching_pays(
    held: Held, prompt_tokens: int, backend: str, reason: str
) -> None:
    cls = "agent" if held.turns == 3 else "prose"
    features = replace(FEATURES, prompt_tokens=prompt_tokens)
    d = decide(POLICY, features, _scores(cls, 0.8), BACKENDS, learned=GB10_STATE, held=held)
    assert (d.backend, d.reason) == (backend, reason)


def test_stickiness_does_not_overrule_an_override() -> None:
    held = Held("mtp-0", "mtp", 1, 30_000, 0.0)
    features = replace(FEATURES, temperature=0.7, greedy=False)
    d = decide(POLICY, features, _scores("code", 0.8), BACKENDS, learned=GB10_STATE, held=held)
    assert (d.backend, d.reason) == ("plain-0", "sampled")


def test_stickiness_can_be_disabled() -> None:
    policy = POLICY.model_copy(
        update={"stickiness": POLICY.stickiness.model_copy(update={"enabled": False})}
    )
    held = Held("mtp-0", "mtp", 1, 30_000, 0.0)
    features = replace(FEATURES, prompt_tokens=30_000)
    d = decide(policy, features, _scores("prose", 0.8), BACKENDS, learned=GB10_STATE, held=held)
    assert d.backend == "plain-0"


def test_failover_order_and_unhealthy_placement_still_hold() -> None:
    backends = (BackendState("mtp-0", "mtp", healthy=False), BackendState("plain-0", "plain"))
    d = decide(POLICY, FEATURES, _scores("agent", 0.9), backends, learned=GB10_STATE)
    assert d == Decision("mtp", "plain-0", "learned+unhealthy_failover", "routes.agent",
                         False, 0.0)
    assert failover_order(d, backends) == ["plain-0", "mtp-0"]

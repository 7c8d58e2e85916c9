"""Pool routes in the policy, and the decision with pools and rewrites (policies.decision.route)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from classifiers.scores import Scores
from fileio.yamlfile import ConfigError, parse_model
from policies.decision.ask import Ask, BackendState, State
from policies.decision.decide import decide
from policies.decision.finish import InFlight
from policies.decision.pins import RequestContext
from policies.decision.route import decide_route
from policies.decision.sessions import Held
from policies.learner.routemodel import RouteEvidence, RouteModel
from policies.policyfile.machine import LOCAL_PAIR
from policies.policyfile.pools import PoolRoute, pool_context
from policies.policyfile.rewrite import Rewrite
from policies.policyfile.schema import Policy
from tests.policies.decision.test_decide import FEATURES, GB10

NOTHINK = {"pool": "nothink", "rewrite": {"model": "deepseek-chat", "thinking": False},
           "endpoints": ["chat", "messages", "responses"]}
# plain-1 is busy: two requests in flight, 1.5 s of predicted work left
BUSY = (InFlight(predicted_ms=1000.0, elapsed_ms=500.0), InFlight(predicted_ms=1000.0, elapsed_ms=0.0))
BACKENDS = (
    BackendState("mtp-0", "mtp"),
    BackendState("plain-0", "plain", pools=frozenset({"nothink"})),
    BackendState("plain-1", "plain", inflight=2, queue=BUSY, pools=frozenset({"nothink"})),
)


def _policy(routes: dict[str, Any], **extra: Any) -> Policy:
    return Policy.model_validate({"routes": routes, **extra}, context=pool_context(["nothink"]))


def _scores(cls: str, lang: str = "en") -> Scores:
    return Scores(cls, lang, {cls: 1.0})


# --- the schema -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("routes:\n  chat: nothin\n", "p.yaml:2: routes.chat.pool: Value error, no pool named 'nothin'"),
        ("routes:\n  chat:\n    pool: nothink\n    rewrite: {thinking: false}\n",
         "p.yaml:4: routes.chat.rewrite: Value error, thinking: /v1/completions has no thinking"),
        (("routes:\n  chat:\n    endpoints: [completions]\n    pool: plain\n"
          "    rewrite: {max_tokens: 5, thinking: true}\n"),
         "p.yaml:5: routes.chat.rewrite: Value error, thinking: /v1/completions"),
        (("routes:\n  chat:\n    endpoints: [completions]\n    arms:\n      - plain\n"
          "      - {pool: nothink, rewrite: {thinking: false}}\n"),
         "p.yaml:4: routes.chat.arms: Value error, 1.rewrite.thinking: /v1/completions"),
        ("routes:\n  chat:\n    pool: plain\n    rewrite: {temprature: 0}\n",
         "p.yaml:4: routes.chat.rewrite.temprature: unknown key"),
        ("routes:\n  chat: {arms: [plain]}\n", "p.yaml:2: routes.chat: Value error, 'arms' needs"),
        ("routes:\n  chat: {arms: [plain, plain]}\n", "p.yaml:2: routes.chat.arms: Value error, arms must differ"),
        ("languages:\n  zh:\n    chat: {pool: elsewhere}\n",
         "p.yaml:3: languages.zh.chat.pool: Value error, no pool named 'elsewhere'"),
    ],
)
def test_bad_pool_routes_are_located(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_model(text, Policy, path="p.yaml", context=pool_context(["nothink"]))
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_a_route_word_stays_a_string_and_a_name_is_a_pool_route() -> None:
    policy = _policy({"code": "mtp", "chat": "nothink", "prose": NOTHINK})
    assert policy.routes["code"] == "mtp"
    assert isinstance(policy.routes["chat"], PoolRoute)
    assert policy.route_for("chat", "en") == ("plain", "default")  # decide alone skips them
    route, rule = policy.class_route("prose", "en", "completions")
    assert (route, rule) == ("plain", "default")  # the route does not list completions
    route, rule = policy.class_route("prose", "en", "chat")
    assert isinstance(route, PoolRoute) and rule == "routes.prose"


# --- the decision ---------------------------------------------------------------------------


def test_a_named_pool_takes_its_soonest_member_and_the_rewrite() -> None:
    routed = decide_route(Ask(FEATURES, _scores("chat")), State(_policy({"chat": NOTHINK}), GB10, BACKENDS))
    assert (routed.pool, routed.decision.backend, routed.decision.profile) == (
        "nothink", "plain-0", "plain")
    assert routed.rewrite == Rewrite(model="deepseek-chat", thinking=False)
    assert routed.arm == "nothink+model=deepseek-chat,thinking=off"
    assert routed.order == ("plain-0", "plain-1", "mtp-0")
    assert routed.as_dict()["pool"] == "nothink"
    # only the pool's members competed, on the finish rule (plain-1's queue put it behind)
    finish = routed.decision.finish_ms
    assert set(finish) == {"plain-0", "plain-1"} and finish["plain-1"] > finish["plain-0"] + 1000


def test_a_named_pool_of_both_profiles_is_placed_by_the_predicted_finish() -> None:
    """A pool mixing an mtp and a plain instance: the one that finishes the request soonest,
    by the machine's speedup for the class (the GB10: mtp for agent turns, a CPU pair: plain)."""
    both = (BackendState("mtp-0", "mtp", pools=frozenset({"pair"})),
            BackendState("plain-0", "plain", pools=frozenset({"pair"})),
            BackendState("plain-9", "plain"))
    policy = Policy.model_validate({"routes": {"agent": "pair"}}, context=pool_context(["pair"]))
    on_gb10 = decide_route(Ask(FEATURES, _scores("agent")), State(policy, GB10, both))
    assert (on_gb10.pool, on_gb10.decision.backend, on_gb10.decision.reason) == (
        "pair", "mtp-0", "pool")
    cpu = RouteModel(LOCAL_PAIR, RouteEvidence())
    on_cpu = decide_route(Ask(FEATURES, _scores("agent")), State(policy, cpu, both))
    assert (on_cpu.pool, on_cpu.decision.backend) == ("pair", "plain-0")
    assert set(on_cpu.decision.finish_ms) == {"mtp-0", "plain-0"}  # plain-9 is not a member


@pytest.mark.parametrize(
    "context",
    [RequestContext(header_route="mtp"), RequestContext(model="deepseek-reasoner"),
     RequestContext(api_key_name="batch")],
)
def test_pins_on_the_request_win_and_are_never_rewritten(context: RequestContext) -> None:
    policy = _policy({"chat": NOTHINK}, overrides={
        "models": {"deepseek-reasoner": "plain"}, "api_keys": {"batch": "mtp"}})
    routed = decide_route(Ask(FEATURES, _scores("chat"), context), State(policy, GB10, BACKENDS))
    assert routed.rewrite is None and routed.pool in ("mtp", "plain")
    assert routed.decision == decide(Ask(FEATURES, _scores("chat"), context), State(policy, GB10, BACKENDS))
    assert routed.decision.reason in ("header", "model", "api_key")


def test_a_header_naming_a_pool_sends_the_request_there_unchanged() -> None:
    routed = decide_route(Ask(FEATURES, _scores("code"), RequestContext(header_route="nothink")), State(_policy({"chat": "plain"}), GB10, BACKENDS))
    assert (routed.pool, routed.decision.backend, routed.decision.reason) == (
        "nothink", "plain-0", "header")
    assert routed.rewrite is None and set(routed.decision.finish_ms) == {"plain-0", "plain-1"}


def test_header_auto_lets_the_pool_route_decide() -> None:
    routed = decide_route(Ask(FEATURES, _scores("chat"), RequestContext(header_route="auto")), State(_policy({"chat": NOTHINK}), GB10, BACKENDS))
    assert routed.pool == "nothink"


def test_built_in_routes_are_decided_as_before() -> None:
    policy = _policy({"code": "mtp", "chat": "plain"})
    for cls in ("code", "chat", "prose"):
        routed = decide_route(Ask(FEATURES, _scores(cls)), State(policy, GB10, BACKENDS))
        assert routed.decision == decide(Ask(FEATURES, _scores(cls)), State(policy, GB10, BACKENDS))
        assert routed.rewrite is None and routed.arm == routed.decision.profile
    auto = _policy({"agent": "auto"})
    routed = decide_route(Ask(FEATURES, _scores("agent")), State(auto, GB10, BACKENDS))
    assert (routed.decision.backend, routed.decision.reason) == ("mtp-0", "finish")
    assert set(routed.decision.finish_ms) == {"mtp-0", "plain-0", "plain-1"}


def test_classifier_failure_uses_the_fallback_without_rewrite() -> None:
    routed = decide_route(Ask(FEATURES, None), State(_policy({"chat": NOTHINK}), GB10, BACKENDS))
    assert (routed.decision.reason, routed.rewrite) == ("classifier_error", None)


def test_overrides_judge_the_request_as_rewritten() -> None:
    """A route that turns thinking off lets a thinking request reach mtp; one that samples
    sends it to plain (the sampled override sees the rewritten temperature)."""
    thinking = replace(FEATURES, thinking=True, thinking_unset=False)
    policy = _policy({"code": {"pool": "mtp", "rewrite": {"thinking": False},
                               "endpoints": ["chat"]}})
    assert decide(Ask(thinking, _scores("code")), State(policy, GB10, BACKENDS)).reason == "thinking"
    routed = decide_route(Ask(thinking, _scores("code")), State(policy, GB10, BACKENDS))
    assert (routed.pool, routed.decision.reason, routed.decision.backend) == ("mtp", "class", "mtp-0")
    sampled = _policy({"code": {"pool": "mtp", "rewrite": {"temperature": 0.8}}})
    routed = decide_route(Ask(FEATURES, _scores("code")), State(sampled, GB10, BACKENDS))
    assert (routed.pool, routed.decision.reason) == ("plain", "sampled")
    assert routed.rewrite == Rewrite(temperature=0.8)  # the route's rewrite still applies


def test_a_named_pool_is_not_subject_to_the_mtp_or_plain_overrides() -> None:
    sampled = replace(FEATURES, temperature=0.9, greedy=False)
    policy = _policy({"chat": {"pool": "nothink"}}, overrides={"sampled": "mtp"})
    routed = decide_route(Ask(sampled, _scores("chat")), State(policy, GB10, BACKENDS))
    assert routed.pool == "nothink" and routed.decision.backend == "plain-0"


def test_an_unhealthy_pool_fails_over_and_a_held_conversation_stays() -> None:
    down = (BACKENDS[0], BACKENDS[1]._replace(healthy=False), BACKENDS[2]._replace(healthy=False))
    routed = decide_route(Ask(FEATURES, _scores("chat")), State(_policy({"chat": NOTHINK}), GB10, down))
    assert routed.decision.backend == "mtp-0"
    assert routed.decision.reason == "pool+unhealthy_failover"
    assert routed.rewrite is not None  # the route asked for it, wherever it is served
    # the busy member holds the conversation's 20k-token prefix: re-prefilling it elsewhere
    # would cost more than the 1.5 s queued there
    long_prompt = replace(FEATURES, prompt_tokens=20_000)
    held = Held("plain-1", "plain", turns=3, prompt_tokens=19_900, last_seen=0.0)
    routed = decide_route(Ask(long_prompt, _scores("chat"), held=held), State(_policy({"chat": NOTHINK}), GB10, BACKENDS))
    assert (routed.decision.backend, routed.decision.reason) == ("plain-1", "pool")
    assert routed.decision.queue_ms > 1000
    forgetful = _policy({"chat": NOTHINK}, stickiness={"enabled": False})
    routed = decide_route(Ask(long_prompt, _scores("chat"), held=held), State(forgetful, GB10, BACKENDS))
    assert routed.decision.backend == "plain-0"

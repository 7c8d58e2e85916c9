"""The arms of a route: learned from decision records, compared, explored within the route."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from decisionlog.records import parse_lines
from policies.decision.arm_choice import choose_arm, metric_for, variants_of
from policies.decision.ask import Ask, State
from policies.decision.route import decide_route
from policies.learner.arms import (
    EMPTY_ARMS,
    METRIC_DECODE,
    METRIC_TOTAL,
    ArmsState,
    arms_as_json,
    arms_from_json,
    learn_arms,
)
from policies.learner.observation import observations
from policies.policyfile.pools import Arm, pool_context
from policies.policyfile.schema import Policy
from tests.policies.decision.test_decide import FEATURES, GB10
from tests.policies.decision.test_route import BACKENDS, _scores

THINKING = Arm(pool="plain")
NOTHINK = Arm.model_validate({"pool": "nothink",
                              "rewrite": {"model": "deepseek-chat", "thinking": False}})
MTP = Arm(pool="mtp")


def _record(arm: str | None, tps: float, total_ms: float, *, cls: str = "chat",
            lang: str = "en", status: int = 200, tokens: int = 100) -> dict[str, Any]:
    decision = {"profile": "plain", "backend": "plain-0"}
    if arm is not None:
        decision["arm"] = arm
    return {
        "classifier": {"class": cls, "lang": lang},
        "decision": decision,
        "outcome": {"status": status, "profile": "plain", "decode_tps": tps,
                    "total_ms": total_ms, "completion_tokens": tokens},
    }


def _state(rows: list[dict[str, Any]]) -> ArmsState:
    """The arms' stats of log lines holding `rows`, through the decision log's own parser."""
    lines = (json.dumps({"schema_version": 1, "ts": "2026-11-30T00:00:00.000Z",
                         "request_id": "r", "endpoint": "chat", "features": {}, **r})
             for r in rows)
    return learn_arms(observations(parse_lines(lines)))


def _spread(arm: str, n: int, tps: float, total_ms: float, **kw: Any) -> list[dict[str, Any]]:
    rng = random.Random(arm)
    return [_record(arm, tps * rng.uniform(0.95, 1.05), total_ms * rng.uniform(0.9, 1.1), **kw)
            for _ in range(n)]


def test_records_become_arm_stats_per_class_and_language() -> None:
    rows = [
        _record("nothink+model=deepseek-chat,thinking=off", 14.0, 3000.0),
        _record("nothink+model=deepseek-chat,thinking=off", 16.0, 5000.0, lang="zh"),
        _record(None, 15.0, 20000.0),  # an older record: the profile served is the arm
        _record("plain", 15.0, 0.0),  # no time: taught nothing
        _record("plain", 15.0, 900.0, status=502),
    ]
    state = _state(rows)
    assert state.n_observations == 3
    pooled = state.stats["chat/*"]
    assert pooled["nothink+model=deepseek-chat,thinking=off"].n == 2
    assert pooled["nothink+model=deepseek-chat,thinking=off"].decode_tps == pytest.approx(15.0)
    assert pooled["plain"].total_ms == 20000.0
    assert state.stats["chat/zh"]["nothink+model=deepseek-chat,thinking=off"].n == 1
    assert arms_from_json(json.loads(json.dumps(arms_as_json(state)))) == state
    halves = _state(rows[:2]).merged(_state(rows[2:]))  # sums add: one pass or two, the same
    assert halves == state


def test_same_answers_compare_on_decode_rate_different_answers_on_time() -> None:
    assert metric_for([MTP, THINKING]) == METRIC_DECODE
    assert metric_for([THINKING, NOTHINK]) == METRIC_TOTAL
    greedy = Arm.model_validate({"pool": "mtp", "rewrite": {"temperature": 0}})
    assert metric_for([THINKING, greedy]) == METRIC_DECODE  # a temperature keeps the length
    capped = Arm.model_validate({"pool": "plain", "rewrite": {"max_tokens": 100}})
    assert metric_for([THINKING, capped]) == METRIC_TOTAL


def test_a_default_arm_short_of_samples_keeps_its_requests() -> None:
    rows = _spread(NOTHINK.key, 40, 14.0, 2500.0) + _spread("plain", 3, 15.0, 20000.0)
    state = _state(rows)
    kept = choose_arm([THINKING, NOTHINK], state, "chat", "en", min_samples=30, rate=0.05,
                      draw=0.5)
    assert kept.arm == THINKING and not kept.trusted and kept.probability == 0.05
    explored = choose_arm([THINKING, NOTHINK], state, "chat", "en", min_samples=30, rate=0.05,
                          draw=0.01)
    assert explored.arm == NOTHINK and explored.explored


def test_time_to_the_answer_decides_between_rewrites() -> None:
    # thinking decodes a little faster but writes ten times the tokens
    rows = _spread("plain", 40, 15.0, 20000.0) + _spread(NOTHINK.key, 40, 14.0, 2500.0)
    choice = choose_arm([THINKING, NOTHINK], _state(rows), "chat", "en",
                        min_samples=30, rate=0.05, draw=0.9)
    assert choice.arm == NOTHINK and choice.trusted and not choice.explored
    assert choice.metric == METRIC_TOTAL
    assert choice.probability == 0.0  # conclusive: no exploration


def test_decode_rate_decides_between_variants_that_keep_the_answer() -> None:
    greedy = Arm.model_validate({"pool": "mtp", "rewrite": {"temperature": 0}})
    rows = _spread(greedy.key, 40, 16.0, 9000.0) + _spread("plain", 40, 14.0, 8000.0)
    choice = choose_arm([THINKING, greedy], _state(rows), "chat", "en",
                        min_samples=30, rate=0.05, draw=0.9)
    assert choice.arm == greedy and choice.metric == METRIC_DECODE


def test_arms_sending_one_request_are_one_variant_the_sums_do_not_split() -> None:
    # per class, mtp decodes faster: the sums would say mtp; per request it is the finish rule's
    rows = _spread("mtp", 40, 16.0, 9000.0) + _spread("plain", 40, 14.0, 8000.0)
    for draw in (0.01, 0.5, 0.99):
        choice = choose_arm([THINKING, MTP], _state(rows), "chat", "en",
                            min_samples=30, rate=0.5, draw=draw)
        assert choice.variant == (THINKING, MTP) and choice.arm == THINKING
        assert not choice.explored and choice.probability == 0.0 and choice.draw_left == draw
    variants = variants_of([THINKING, NOTHINK, MTP])
    assert variants == [(THINKING, MTP), (NOTHINK,)]
    summed = choose_arm([THINKING, NOTHINK, MTP], _state(rows + _spread(NOTHINK.key, 80, 14.0,
                                                                       20000.0)),
                        "chat", "en", min_samples=30, rate=0.05, draw=0.9)
    # the variant's sums are its arms' together: 80 requests at ~8,500 ms beat 80 at 20,000
    assert summed.variant == (THINKING, MTP) and summed.trusted


def test_cold_routes_keep_the_first_arm_and_explore_the_others() -> None:
    choice = choose_arm([THINKING, NOTHINK], EMPTY_ARMS, "chat", "en",
                        min_samples=30, rate=0.05, draw=0.9)
    assert choice.arm == THINKING and not choice.trusted
    assert choice.draw_left is not None and 0 <= choice.draw_left < 1
    explored = choose_arm([THINKING, NOTHINK], EMPTY_ARMS, "chat", "en",
                          min_samples=30, rate=0.05, draw=0.1)
    assert explored.arm == NOTHINK and explored.explored and explored.probability == 0.5
    assert choose_arm([THINKING, NOTHINK], EMPTY_ARMS, "chat", "en", min_samples=30,
                      rate=0.0, draw=0.1).arm == THINKING  # rate 0: never


def test_exploration_never_leaves_the_route_s_arms() -> None:
    # the state knows a much better arm that this route does not allow
    rows = (_spread("mtp", 5, 15.0, 9000.0) + _spread("plain", 5, 15.0, 9000.0)
            + _spread("plain+model=deepseek-chat", 200, 40.0, 100.0))
    state = _state(rows)
    rng = random.Random(7)
    chosen = {choose_arm([MTP, NOTHINK], state, "chat", "en", min_samples=30, rate=0.5,
                         draw=rng.random()).arm.key for _ in range(300)}
    assert chosen == {"mtp", NOTHINK.key}


def test_a_route_with_arms_routes_within_them() -> None:
    policy = Policy.model_validate(
        {"routes": {"chat": {"endpoints": ["chat"], "arms": [
            "plain", {"pool": "nothink", "rewrite": {"model": "deepseek-chat", "thinking": False}}
        ]}}},
        context=pool_context(["nothink"]),
    )
    rows = _spread("plain", 40, 15.0, 20000.0) + _spread(NOTHINK.key, 40, 14.0, 2500.0)
    routed = decide_route(Ask(FEATURES, _scores("chat"), draw=0.7), State(policy, GB10, BACKENDS, arms=_state(rows)))
    assert routed.arm == NOTHINK.key and routed.decision.reason == "arm"
    cold = [decide_route(Ask(FEATURES, _scores("chat"), draw=d / 20), State(policy, GB10, BACKENDS)).arm
            for d in range(20)]
    assert set(cold) == {"plain", NOTHINK.key}
    assert cold.count(NOTHINK.key) == 10  # the cold-start half

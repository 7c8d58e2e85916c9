"""Exploration probabilities and session stickiness, as tables."""

from __future__ import annotations

import math
import random

import pytest

from classifiers.request_view import view_request
from policies.explore import (
    COLD_START_SHARE,
    CONCLUSIVE,
    cold_arm,
    contrary_chance,
    exploration_probability,
    explore,
)
from policies.learned import EMPTY_STATE, Belief, BinEstimate, LearnedState
from policies.sessions import (
    SessionTable,
    conversation_key,
    expected_remaining_tokens,
    switch_verdict,
)


def _belief(speedup: float, se: float, trusted: bool = True) -> Belief:
    bins = tuple(BinEstimate(i / 10, (i + 1) / 10, 50, 50, speedup, se) for i in range(10))
    return Belief(
        "code", "en", "cost_model", 500, 500, 0.8, 0.56, 15.0, 14.0,
        speedup, se, 0.0 if speedup > 1 else 1.01, trusted, bins,
    )


@pytest.mark.parametrize(
    ("belief", "expected"),
    [
        (None, 0.05),  # nothing known: the full budget
        (_belief(1.2, 0.01, trusted=False), 0.05),  # too few samples to trust
        (_belief(1.0, 0.05), 0.05),  # a coin toss
        (_belief(1.05, 0.05), 0.05 * 2 * (1 - 0.8413447)),  # one standard error away
        (_belief(1.094, 0.002), 0.0),  # conclusive
        (_belief(0.96, 0.002), 0.0),
    ],
)
def test_exploration_probability(belief: Belief | None, expected: float) -> None:
    assert exploration_probability(belief, 0.5, 0.05) == pytest.approx(expected, rel=1e-4)


def test_no_exploration_without_a_budget() -> None:
    assert exploration_probability(None, 0.5, 0.0) == 0.0


@pytest.mark.parametrize(
    ("belief", "rate", "expected"),
    [
        (None, 0.05, COLD_START_SHARE),  # an arm never sampled: a coin flip
        (_belief(1.094, 0.002), 0.05, COLD_START_SHARE),  # even where a class looked conclusive
        (None, 0.8, 0.8),  # a larger budget stays
        (None, 0.0, 0.0),  # exploration off is off
    ],
)
def test_cold_start_explores_the_thin_arm(belief: Belief | None, rate: float, expected: float) -> None:
    assert exploration_probability(belief, 0.5, rate, cold=True) == expected


def test_an_arm_is_cold_until_it_has_min_samples_over_all_classes() -> None:
    def state(n_plain_by_class: dict[str, int]) -> LearnedState:
        beliefs = {f"{c}/*": Belief(c, "*", "tps_ratio", 40, n, None, None, 10.0, 12.0, 0.8, 0.1,
                                    1.01, False, ()) for c, n in n_plain_by_class.items()}
        beliefs["code/en"] = Belief("code", "en", "tps_ratio", 40, 99, None, None, 10.0, 12.0,
                                    0.8, 0.1, 1.01, False, ())  # a language's belief: not counted
        return LearnedState("", 0, 0, 5, None, beliefs)

    # the arm asked about is the one exploration would go to: not the believed profile
    assert cold_arm(None, "mtp", 5) and cold_arm(EMPTY_STATE, "plain", 5)
    assert cold_arm(state({"code": 2, "prose": 2}), "mtp", 5)
    assert not cold_arm(state({"code": 2, "prose": 3}), "mtp", 5)
    assert not cold_arm(state({"code": 0}), "plain", 5)


def test_contrary_chance_is_the_normal_tail() -> None:
    estimate = BinEstimate(0.0, 0.1, 10, 10, 1.1, 0.05)
    assert contrary_chance(estimate) == pytest.approx(0.02275, rel=1e-3)
    assert contrary_chance(BinEstimate(0.0, 0.1, 0, 0, 1.1, math.inf)) == 0.5
    assert contrary_chance(BinEstimate(0.0, 0.1, 10, 10, 1.5, 0.1)) < CONCLUSIVE


@pytest.mark.parametrize(
    ("draw", "profile", "explored"),
    [(0.0, "plain", True), (0.049, "plain", True), (0.05, "mtp", False), (0.9, "mtp", False)],
)
def test_explore_flips_within_the_budget(draw: float, profile: str, explored: bool) -> None:
    choice = explore("mtp", None, 0.5, 0.05, draw)
    assert (choice.profile, choice.explored) == (profile, explored)


def test_explore_rejects_a_draw_outside_the_unit_interval() -> None:
    with pytest.raises(ValueError, match="draw"):
        explore("mtp", None, 0.5, 0.05, 1.0)


def test_explored_share_matches_the_budget() -> None:
    rng = random.Random(0)
    flips = sum(explore("mtp", None, 0.5, 0.05, rng.random()).explored for _ in range(20_000))
    assert 800 < flips < 1200


@pytest.mark.parametrize(
    ("body_a", "hint_a", "body_b", "hint_b", "same"),
    [
        # the same opening turns, later turns added: the same conversation
        (
            {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]},
            None,
            {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                          {"role": "assistant", "content": "A"}, {"role": "user", "content": "R"}]},
            None,
            True,
        ),
        (
            {"messages": [{"role": "user", "content": "Q1"}]}, None,
            {"messages": [{"role": "user", "content": "Q2"}]}, None,
            False,
        ),
        (
            {"messages": [{"role": "user", "content": "Q1"}], "user": "u1"}, None,
            {"messages": [{"role": "user", "content": "Q2"}], "user": "u1"}, None,
            True,
        ),
        (
            {"messages": [{"role": "user", "content": "Q"}]}, "conv-1",
            {"messages": [{"role": "user", "content": "Q"}]}, "conv-2",
            False,
        ),
    ],
)
def test_conversation_key(
    body_a: dict[str, object], hint_a: str | None, body_b: dict[str, object], hint_b: str | None,
    same: bool,
) -> None:
    a = conversation_key(view_request("chat", body_a), hint_a)
    b = conversation_key(view_request("chat", body_b), hint_b)
    assert (a == b) is same
    assert len(a) == 16


@pytest.mark.parametrize(
    ("held", "wanted", "speedup", "prompt", "remaining", "switch"),
    [
        ("plain", "plain", 1.1, 100, 1000, False),  # nothing to switch
        ("plain", "mtp", 1.1, 100, 1000, True),  # saves ~6.2 s of decode, costs 0.2 s
        ("plain", "mtp", 1.1, 20_000, 1000, False),  # a 40 s re-prefill outweighs it
        ("mtp", "plain", 0.9, 1000, 2000, True),
        ("mtp", "plain", 0.99, 1000, 200, False),
        ("plain", "mtp", 0.95, 10, 1000, False),  # no gain at all
    ],
)
def test_switch_verdict(
    held: str, wanted: str, speedup: float, prompt: int, remaining: float, switch: bool
) -> None:
    verdict = switch_verdict(
        held_profile=held, wanted_profile=wanted, speedup=speedup, prompt_tokens=prompt,
        remaining_tokens=remaining, t_plain_ms=68.0, prefill_ms_per_token=2.0,
    )
    assert verdict.switch is switch
    assert verdict.cost_ms == (0.0 if held == wanted else prompt * 2.0)


@pytest.mark.parametrize(("turns", "expected"), [(0, 200.0), (1, 200.0), (5, 1000.0)])
def test_expected_remaining_tokens(turns: int, expected: float) -> None:
    assert expected_remaining_tokens(turns, 200.0) == expected


def test_session_table_remembers_counts_turns_and_forgets() -> None:
    table = SessionTable(max_conversations=2, ttl_s=10.0)
    table.remember("a", "mtp-0", "mtp", 100, now=0.0)
    held = table.remember("a", "mtp-0", "mtp", 150, now=5.0)
    assert (held.turns, held.prompt_tokens) == (2, 150)
    assert table.get("a", now=14.0) == held
    assert table.get("a", now=15.1) is None  # idle longer than the ttl
    assert len(table) == 0


def test_session_table_drops_the_least_recently_seen() -> None:
    table = SessionTable(max_conversations=2, ttl_s=100.0)
    table.remember("a", "mtp-0", "mtp", 1, now=0.0)
    table.remember("b", "plain-0", "plain", 1, now=1.0)
    table.remember("a", "mtp-0", "mtp", 1, now=2.0)  # a is now the most recent
    table.remember("c", "plain-0", "plain", 1, now=3.0)
    assert table.get("b", now=3.0) is None
    assert table.get("a", now=3.0) is not None
    table.resize(1, 100.0)
    assert len(table) == 1 and table.get("c", now=3.0) is not None
    assert table.expire(now=200.0) == 1


def test_session_table_rejects_bad_limits() -> None:
    with pytest.raises(ValueError):
        SessionTable(max_conversations=0, ttl_s=1.0)

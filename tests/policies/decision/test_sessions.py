"""Conversation keys and the table of where each conversation's prefix lives."""

from __future__ import annotations

import pytest

from classifiers.request_view import view_request
from policies.decision.sessions import SessionTable, conversation_key


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

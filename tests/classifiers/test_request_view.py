"""One normalized view of the four API shapes (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from classifiers.request_view import LAST_USER_CAP, InvalidRequest, view_request

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}

SHAPES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "chat",
        {"model": "m", "messages": [{"role": "system", "content": "sys"},
                                    {"role": "user", "content": "hello"}],
         "temperature": 0, "max_tokens": 9, "tools": [TOOL], "tool_choice": "required",
         "response_format": {"type": "json_object"}, "user": "u1"},
        {"last_user_text": "hello", "system_text": "sys", "last_role": "user", "temperature": 0.0,
         "max_tokens": 9, "tool_choice": "required", "response_format": "json_object", "user": "u1"},
    ),
    (
        "chat",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                   {"type": "image_url", "image_url": {"url": "x"}},
                                                   {"type": "text", "text": "part two"}]}],
         "max_completion_tokens": 5, "tool_choice": {"type": "function", "function": {"name": "f"}}},
        {"last_user_text": "part one\npart two", "max_tokens": 5, "tool_choice": "function"},
    ),
    (
        "chat",
        {"messages": [{"role": "user", "content": "run it"},
                      {"role": "assistant", "content": None, "tool_calls": []},
                      {"role": "tool", "content": "exit 0"}]},
        {"last_role": "tool", "roles": ("user", "assistant", "tool"), "last_user_text": "run it"},
    ),
    (
        "completions",
        {"prompt": "def f(x):", "max_tokens": 7, "stream": True},
        {"last_user_text": "def f(x):", "max_tokens": 7, "stream": True, "roles": ("user",)},
    ),
    (
        "completions",
        {"prompt": ["a", "b"]},
        {"last_user_text": "a\nb"},
    ),
    (
        "messages",
        {"model": "claude", "system": [{"type": "text", "text": "be brief"}], "max_tokens": 3,
         "messages": [{"role": "user", "content": "q"},
                      {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "42"}]}],
         "thinking": {"type": "enabled", "budget_tokens": 100}, "metadata": {"user_id": "abc"}},
        {"system_text": "be brief", "last_role": "tool", "thinking": True, "user": "abc",
         "max_tokens": 3, "last_user_text": "q"},
    ),
    (
        "responses",
        {"instructions": "act", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                                          {"type": "function_call_output", "call_id": "c", "output": "ok"}],
         "max_output_tokens": 4, "text": {"format": {"type": "json_schema"}}},
        {"system_text": "act", "last_role": "tool", "max_tokens": 4, "response_format": "json_schema",
         "last_user_text": "hi"},
    ),
    (
        "responses",
        {"input": "plain string", "reasoning": {"effort": "low"}},
        {"last_user_text": "plain string", "thinking": True},
    ),
    (
        "chat",
        {"model": "deepseek-chat", "messages": [{"role": "user", "content": "x"}], "think": False},
        {"thinking": False, "model": "deepseek-chat"},
    ),
]


@pytest.mark.parametrize(("endpoint", "body", "expected"), SHAPES)
def test_view_reads_every_shape(endpoint: str, body: dict[str, Any], expected: dict[str, Any]) -> None:
    view = view_request(endpoint, body)
    assert view.endpoint == endpoint
    for field, value in expected.items():
        assert getattr(view, field) == value, field


BAD: list[tuple[str, object, str | None]] = [
    ("chat", [], None),
    ("chat", {"messages": []}, "messages"),
    ("chat", {"messages": "hi"}, "messages"),
    ("chat", {"messages": [1]}, "messages[0]"),
    ("chat", {"messages": [{"content": "x"}]}, "messages[0].role"),
    ("completions", {}, "prompt"),
    ("completions", {"prompt": 3}, "prompt"),
    ("messages", {"messages": None}, "messages"),
    ("responses", {"input": []}, "input"),
    ("responses", {"input": [5]}, "input[0]"),
    ("embeddings", {"input": "x"}, None),
]


@pytest.mark.parametrize(("endpoint", "body", "param"), BAD)
def test_invalid_requests_say_which_parameter(endpoint: str, body: object, param: str | None) -> None:
    with pytest.raises(InvalidRequest) as info:
        view_request(endpoint, body)
    assert info.value.param == param
    assert str(info.value)


def test_huge_bodies_keep_only_bounded_text() -> None:
    huge = "x" * 400_000
    view = view_request("chat", {"messages": [{"role": "user", "content": huge},
                                              {"role": "assistant", "content": huge},
                                              {"role": "user", "content": huge}]})
    assert len(view.last_user_text) == LAST_USER_CAP
    assert len(view.context_tail) <= 4_000
    assert view.total_chars == 3 * 400_000

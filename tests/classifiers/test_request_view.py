"""One normalized view of the four API shapes (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from classifiers.request_view import (
    ACK_CAP,
    LAST_USER_CAP,
    MATERIAL_CAP,
    SET_UP_TURNS,
    InvalidRequest,
    view_request,
)

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


def _chat(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"messages": [{"role": role, "content": text} for role, text in turns]}


ACK = "Ok, any changes I propose will be to those files."


@pytest.mark.parametrize(
    ("endpoint", "body", "tool_results", "set_up"),
    [
        # an agent's step: the results after the last user turn, in order; earlier ones are not
        ("chat", _chat(("user", "old"), ("tool", "r0"), ("user", "fix it"), ("assistant", ""),
                       ("tool", "r1"), ("assistant", ""), ("function", "r2")), ("r1", "r2"), ()),
        ("messages", {"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                          "content": [{"type": "text", "text": "file body"}]}]}]},
         ("file body",), ()),
        ("responses", {"input": [{"role": "user", "content": "hi"},
                                 {"type": "function_call", "arguments": "{}"},
                                 {"type": "function_call_output", "call_id": "c", "output": "ok"}]},
         ("ok",), ()),
        # aider: the files, an acknowledgement, the ask; up to SET_UP_TURNS of them, in order
        ("chat", _chat(("system", "s"), ("user", "files"), ("assistant", ACK), ("user", "rename")),
         (), ("files",)),
        ("chat", _chat(("user", "map"), ("assistant", "Ok."), ("user", "files"), ("assistant", ACK),
                       ("user", "rename")), (), ("map", "files")),
        ("chat", _chat(*[t for i in range(SET_UP_TURNS + 2) for t in (("user", f"u{i}"), ("assistant", "Ok."))],
                       ("user", "go")), (), tuple(f"u{i}" for i in range(2, SET_UP_TURNS + 2))),
        # an answer longer than an acknowledgement ends the set-up turns: the old question is history
        ("chat", _chat(("user", "files"), ("assistant", "x" * (ACK_CAP + 1)), ("user", "rename")), (), ()),
        ("chat", _chat(("user", "files"), ("assistant", ACK), ("user", "more"), ("assistant", "y" * 500),
                       ("user", "rename")), (), ()),
        ("chat", _chat(("tool", "r"), ("assistant", "Ok."), ("user", "go")), (), ()),
        ("completions", {"prompt": "def f(x):"}, (), ()),
    ],
)
def test_view_keeps_the_material_an_answer_may_copy(endpoint: str, body: dict[str, Any],
                                                     tool_results: tuple[str, ...],
                                                     set_up: tuple[str, ...]) -> None:
    view = view_request(endpoint, body)
    assert (view.tool_results, view.set_up) == (tool_results, set_up)


def test_material_is_capped_from_the_newest_result_and_the_nearest_turn() -> None:
    big = MATERIAL_CAP // 2 + 10
    view = view_request("chat", _chat(
        ("user", "a" * big), ("assistant", "Ok."), ("user", "b" * big), ("assistant", "Ok."),
        ("user", "go"), ("tool", "c" * big), ("tool", "d" * big), ("tool", "e" * big)))
    assert [len(t) for t in view.tool_results] == [MATERIAL_CAP - big, big]
    assert [t[0] for t in view.tool_results] == ["d", "e"]  # the newest whole, its elder cut
    assert view.set_up == ("a" * (MATERIAL_CAP - big), "b" * big)
    huge = view_request("chat", _chat(("user", "go"), *[("tool", "z" * 400_000)] * 50))
    assert sum(map(len, huge.tool_results)) == MATERIAL_CAP


@pytest.mark.parametrize("prompt", [[1, 2, 3], [-9373, float(-1193920434292303069184), 63771]])
def test_a_prompt_of_token_ids_is_a_request_with_no_text(prompt: list[float]) -> None:
    """An integer past 64 bits arrives as a float from the fast JSON parser (router.request.json_body):
    still token ids, for the engine to judge (schemathesis found the 400 it used to get)."""
    view = view_request("completions", {"prompt": prompt})
    assert view.last_user_text == ""


@pytest.mark.parametrize("prompt", [["a", 1], [2.5890419884777833e-42], [1, 2.5], [True]])
def test_a_prompt_of_neither_text_nor_integers_is_refused(prompt: list[object]) -> None:
    with pytest.raises(InvalidRequest):
        view_request("completions", {"prompt": prompt})

"""Request features: a table of cases, bounded work, the token estimate."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from classifiers.copying import COPY_NAMES
from classifiers.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    extract,
)
from classifiers.request_view import view_request


def _features(body: dict[str, Any], count: Any = None) -> dict[str, Any]:
    return extract(view_request("chat", body), count).as_dict()


def _user(text: str, **extra: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], **extra}


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    ("body", "name", "expected"),
    [
        (_user("hi", tools=TOOLS), "n_tools", 1),
        (_user("hi", tools=TOOLS, tool_choice="required"), "tool_choice_required", True),
        (_user("hi", tools=TOOLS, tool_choice="none"), "tool_choice_none", True),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "{}"}]},
         "last_role_tool", True),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "{}"},
                       {"role": "user", "content": "y"}]}, "history_has_tool", True),
        (_user("```python\nprint(1)\n```"), "code_fences", 1),
        (_user("```python\nprint(1)"), "code_fences", 1),
        (_user("你好"), "cjk_share", 1.0),
        (_user("修复：```python\nprint('a long english line')\n```"), "cjk_share", 1.0),
        (_user("from typing import List\n\ndef f(x: List[int]) -> int:\n    \"\"\"Sum.\"\"\""),
         "starts_with_code", True),
        (_user("@app.get('/items')\ndef items(): ..."), "starts_with_code", True),
        (_user("Let me know what you think of x = 3?"), "starts_with_code", False),
        (_user("@maria see you at noon"), "starts_with_code", False),
        (_user("def f(x):\n    return x\n"), "indented_line_share", 0.5),
        (_user("hi", tools=TOOLS), "agent_structure", False),
        ({"messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "{}"},
                       {"role": "user", "content": "y"}], "tools": TOOLS},
         "agent_structure", True),
        (_user("hi", response_format={"type": "json_object"}), "json_mode", True),
        (_user("hi", temperature=0), "greedy", True),
        (_user("hi"), "temperature", -1.0),
        (_user("hi", max_tokens=64), "max_tokens", 64),
        (_user("hi", model="deepseek-reasoner"), "thinking", True),
        (_user("hi", model="deepseek-chat"), "thinking_unset", False),
        (_user("hi"), "thinking_unset", True),
    ],
)
def test_feature_table(body: dict[str, Any], name: str, expected: object) -> None:
    assert _features(body)[name] == expected


def test_code_lines_are_recognised() -> None:
    code = "def f(x):\n    return x + 1\n\nclass A:\n    pass\n"
    assert _features(_user(code))["code_line_share"] >= 0.5
    assert _features(_user("Tell me about the history of Rome."))["code_line_share"] == 0.0


def test_tokens_are_estimated_from_a_small_sample() -> None:
    calls: list[int] = []

    def count(text: str) -> int:
        calls.append(len(text))
        return len(text) // 4

    features = _features(_user("word " * 60_000), count)
    assert max(calls) <= 192  # never the whole turn
    assert 70_000 <= features["prompt_tokens"] <= 80_000
    assert features["last_user_tokens"] > 0


def test_estimate_without_a_tokenizer_counts_cjk_per_character() -> None:
    assert _features(_user("你好" * 50))["prompt_tokens"] == 100


def test_vector_order_and_schema() -> None:
    features = extract(view_request("chat", _user("hi")))
    assert len(features.vector()) == len(FEATURE_NAMES) == 27  # the shipped artifact's
    assert FEATURE_SCHEMA_VERSION == 5
    assert FEATURE_NAMES[-1] == "agent_structure"  # derived: the model reads it too


def test_the_copy_signals_are_named_in_as_dict_and_kept_out_of_the_vector() -> None:
    # the route model reads these by name from the decision log
    assert COPY_NAMES == ("quoted_code_share", "quoted_json_share", "quoted_text_share",
                          "quoted_chars", "edit_verb", "reemit_format", "rename_sites")
    assert "copy" not in FEATURE_NAMES and not set(COPY_NAMES) & set(FEATURE_NAMES)
    body = _user("Rename f to g, return the whole file:\n```python\n" + "def f():\n    return 1\n" * 4 + "```")
    features = extract(view_request("chat", body))
    assert list(features.as_dict()) == [*FEATURE_NAMES, *COPY_NAMES]
    assert features.as_dict()["reemit_format"] is True and features.as_dict()["edit_verb"] is True
    assert features.as_dict()["quoted_code_share"] > 0.5
    plain = extract(view_request("chat", _user("Rename f to g")))
    assert features.vector() == replace(features, copy=plain.copy).vector()  # not read by the model


FLIGHTS = [{"type": "function", "function": {
    "name": "search_flights", "description": "Search flights between two airports"}}]
INVOICE = [{"type": "function", "function": {"name": "generate_invoice", "description": "生成发票"}}]


@pytest.mark.parametrize(
    ("text", "tools", "expected"),
    [
        ("Find flights from SFO to JFK tomorrow", FLIGHTS, 0.2),
        ("Find me an ice cream store", FLIGHTS, 0.0),
        ("thanks!", FLIGHTS, 0.0),
        ("search flights please", [{"name": "searchFlights"}], 1.0),
        ("帮我生成发票", INVOICE, 0.6),
        ("Find flights", [], 0.0),
    ],
)
def test_tool_text_overlap(text: str, tools: list[dict[str, Any]], expected: float) -> None:
    assert _features(_user(text, tools=tools))["tool_text_overlap"] == expected


@pytest.mark.parametrize(
    ("text", "exclaim", "laugh"),
    [
        ("so cool!", True, False),
        ("太好了！", True, False),
        ("haha that's so true", False, True),
        ("lol ok :)", False, True),
        ("哈哈，你真逗", False, True),
        ("if a != b: return x", False, False),
        ("Fix this:\n```js\nif (!ok) { alert('!') }\n```", False, False),
        ("Explain how a shallow copy works (C:\\Users path)", False, False),
    ],
)
def test_spoken_register_marks(text: str, exclaim: bool, laugh: bool) -> None:
    features = extract(view_request("chat", {"messages": [{"role": "user", "content": text}]}))
    assert (features.exclaims, features.laughs) == (exclaim, laugh)

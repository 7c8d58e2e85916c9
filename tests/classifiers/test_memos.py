"""The memos of tool lists and asks: what they answer is what reading afresh gives."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from classifiers.features import extract
from classifiers.memos import AskMemo
from classifiers.request_view import view_request

_ASK_BITS = ["Fix this:\n", "```python\n", "```\n", "def f(x):\n", "    return x\n", "lol ", ":)",
             "so cool! ", "你好呢，", "哈哈", "I think you ", "Explain the hash map. ", "{", "}",
             "import os\n", "\t", "  ", "\n", "SELECT 1;", "x -> y", "omg ", "~~~\n"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.lists(st.sampled_from(_ASK_BITS), max_size=12).map("".join), min_size=1,
                max_size=6))
def test_features_read_through_the_ask_memo_are_those_read_afresh(asks: list[str]) -> None:
    memo = AskMemo(size=2)  # smaller than the asks: hits, misses and evictions
    described = [{"type": "function", "function": {
        "name": "explain_hash_map", "description": "Explain the map; fix the import of os."}}]
    for i, text in enumerate(asks + asks[::-1]):
        messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
        body: dict[str, Any] = {"messages": messages}
        if i % 3:  # with tools (the overlap reads the ask's words), or without
            body["tools"] = described
        if i % 2:  # the other asks as a system prompt, a set-up turn and tool results
            messages[:0] = [{"role": "system", "content": asks[i % len(asks)]},
                            {"role": "user", "content": asks[-1]}, {"role": "assistant", "content": "Ok."}]
            messages += [{"role": "tool", "content": a} for a in asks[: i % 4]]
        view = view_request("chat", body)
        assert extract(view, asks=memo) == extract(view)
        assert len(memo) <= 2


def test_the_ask_memo_answers_a_resent_ask_from_memory() -> None:
    memo = AskMemo(size=1)
    first = memo.facts("lol, fix this: ```x = 1```")
    assert memo.facts("lol, fix this: ```x = 1```") is first
    memo.facts("another ask")
    assert len(memo) == 1
    assert memo.facts("lol, fix this: ```x = 1```") is not first  # evicted, read again
    words = memo.words("explain the hash map")
    assert words == frozenset({"explain", "hash", "map"})  # "the" is a stop word
    assert memo.words("explain the hash map") is words


def test_the_ask_memo_answers_resent_material_and_system_prompts_from_memory() -> None:
    memo = AskMemo(size=2)
    result = memo.quoted('{"a": 1}', True)
    assert memo.quoted('{"a": 1}', True) is result and result.json == 8
    assert memo.quoted('{"a": 1}', False) is not result  # a turn is read as a turn
    assert memo.formats("Reply with SEARCH/REPLACE blocks.") is True
    assert memo.formats.cache_info().hits == 0
    memo.formats("Reply with SEARCH/REPLACE blocks.")
    assert memo.formats.cache_info().hits == 1

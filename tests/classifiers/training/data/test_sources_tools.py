"""BFCL function docs become OpenAI tools; ground-truth calls are parsed safely; glaive turns
that lead to a call are agent turns."""

from __future__ import annotations

import pytest

from classifiers.training.data import sources_tools as st
from classifiers.training.data.sources_tools import (
    _parse_call,
    leads_to_call,
    openai_tools,
    schema,
    tool_name,
)


def test_bfcl_types_become_json_schema() -> None:
    converted = schema({"type": "dict", "properties": {
        "x": {"type": "float"}, "pair": {"type": "tuple", "items": {"type": "integer"}},
        "anything": {"type": "any"}}})
    assert converted["type"] == "object"
    assert converted["properties"]["x"]["type"] == "number"
    assert converted["properties"]["pair"]["type"] == "array"
    assert converted["properties"]["anything"]["type"] == "string"


def test_tools_get_sanitised_names() -> None:
    tools = openai_tools([{"name": "requests.get", "description": "GET",
                           "parameters": {"type": "dict", "properties": {}}}])
    assert tools[0]["function"]["name"] == "requests_get"
    assert tools[0]["function"]["parameters"]["type"] == "object"
    assert tool_name("a b.c/d") == "a_b_c_d"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("cd(folder='document')", ("cd", {"folder": "document"})),
        ("cp(source='a.txt',destination='b')", ("cp", {"source": "a.txt", "destination": "b"})),
        ("math.sqrt(x=4)", ("math_sqrt", {"x": 4})),
        ("not a call", None),
        ("f(x=open('/etc/passwd'))", None),  # only literals, nothing evaluated
    ],
)
def test_parse_call(source: str, expected: object) -> None:
    assert _parse_call(source) == expected


def _turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"from": role, "value": value} for role, value in pairs]


CALL = ("function_call", '{"name": "f", "arguments": {}}')
OBS = ("observation", '{"ok": true}')


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (_turns(("human", "帮我查天气"), CALL), True),
        # the reply was run as a call: an observation follows it
        (_turns(("human", "算一下折扣"), ("gpt", "好的。AI 计算折扣: {}"), OBS), True),
        # slot filling, one and two rounds, with or without a question mark
        (_turns(("human", "我需要一个二维码"), ("gpt", "您网站的URL是什么？"), ("human", "x.com"),
                CALL), True),
        (_turns(("human", "创建账户"), ("gpt", "请提供用户名和邮箱。"), ("human", "a, b"), CALL), True),
        (_turns(("human", "二维码"), ("gpt", "URL？"), ("human", "x.com"), ("gpt", "多大？"),
                ("human", "500"), CALL), True),
        # an answer, then a new request that is called: the first turn is not agent
        (_turns(("human", "谢谢！"), ("gpt", "不客气！"), ("human", "查天气"), CALL), False),
        # a generic offer is not slot filling
        (_turns(("human", "谢谢"), ("gpt", "还有什么可以帮您的吗？"), ("human", "查天气"), CALL), False),
        (_turns(("human", "你好"), ("gpt", "你好！")), False),
        (_turns(("human", "a"), ("gpt", "?"), ("human", "b"), ("gpt", "?"), ("human", "c"),
                ("gpt", "?"), ("human", "d"), ("gpt", "?"), ("human", "e"), CALL), False),
    ],
)
def test_a_turn_leads_to_a_call(turns: list[dict[str, str]], expected: bool) -> None:
    assert leads_to_call(turns, 0) is expected


def test_later_multi_turn_turns_carry_the_earlier_calls_and_results() -> None:
    item = {"id": "multi_turn_base_7", "question": [
        [{"role": "user", "content": "Go to the docs folder."}], [],
        [{"role": "user", "content": "Now list what is there."}],
        [{"role": "user", "content": "Thanks, that is all."}]]}
    turns = [[("cd", {"folder": "docs"})], [], [("ls", {})], []]
    rows = st._later_turns("multi_turn_base", item, [{"type": "function"}], turns)
    assert [r.id for r in rows] == ["bfcl/multi_turn_base_7/turn2"]  # turn 3 calls nothing
    messages = rows[0].request["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "cd"
    assert (rows[0].label, rows[0].provenance) == ("agent", "derived")

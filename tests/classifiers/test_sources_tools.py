"""BFCL function docs become OpenAI tools; ground-truth calls are parsed safely."""

from __future__ import annotations

import pytest

from classifiers.data.sources_tools import _parse_call, openai_tools, schema, tool_name


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

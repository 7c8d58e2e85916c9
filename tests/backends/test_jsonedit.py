"""Dropping a member from JSON text keeps every other byte."""

from __future__ import annotations

import json

import pytest

from backends.jsonedit import drop_member

CHOICES = frozenset({"choices"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a":1,"meta_info":{"x":[1,{"y":"}"}]},"b":2}', '{"a":1,"b":2}'),
        ('{"meta_info": {"x": 1}, "a": 1.50}', '{"a": 1.50}'),
        ('{"a": "\\u00e9", "meta_info": null}', '{"a": "\\u00e9"}'),
        ('{"meta_info":1}', "{}"),
        ('{ "a" : "meta_info" , "b":["meta_info"] }', '{ "a" : "meta_info" , "b":["meta_info"] }'),
        # per choice, and nowhere deeper
        (('{"choices":[{"index":0,"meta_info":{"spec_verify_ct":3},"delta":{"meta_info":1}}],'
          '"meta_info":{}}'),
         '{"choices":[{"index":0,"delta":{"meta_info":1}}]}'),
        ('{"other":[{"meta_info":1}]}', '{"other":[{"meta_info":1}]}'),
        ('{"a":"say \\"meta_info\\": 1","meta_info":2}', '{"a":"say \\"meta_info\\": 1"}'),
    ],
)
def test_drops_the_member_and_keeps_the_rest(text: str, expected: str) -> None:
    edited = drop_member(text, "meta_info", in_arrays=CHOICES)
    assert edited == expected
    json.loads(edited)


@pytest.mark.parametrize("text", ["[1, 2]", "not json", '{"a": ', ""])
def test_not_an_object_is_none(text: str) -> None:
    assert drop_member(text, "meta_info") is None

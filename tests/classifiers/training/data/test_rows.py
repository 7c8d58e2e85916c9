"""Corpus rows: language, serialisation, validation, deterministic sampling."""

from __future__ import annotations

import pytest

from classifiers.training.data.rows import (
    CorpusError,
    Row,
    alternate,
    chat,
    from_json,
    lang_of,
    pick,
    user,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello there, how are you?", "en"),
        ("你好，今天天气怎么样？", "zh"),
        ("修复这个错误：```python\nprint('hello world, this is a long english line')\n```", "zh"),
        ("こんにちは、元気ですか", "ja"),
        ("에어컨 켜고 공기청정기 꺼", "ko"),
        ("", "en"),
        ("12345 !!!", "en"),
    ],
)
def test_lang_of(text: str, expected: str) -> None:
    assert lang_of(text) == expected


def test_row_round_trip() -> None:
    row = Row(id="x/1", source="x", family="x/b0", provenance="real", label="chat", lang="zh",
              request=chat([user("你好")]))
    assert from_json(row.as_json()) == row
    borrowed = Row(id="x/1#tools", source="x", family="x/b0", provenance="derived", label="chat",
                   lang="en", request=chat([user("hi")]), also_from=("y",))
    assert from_json(borrowed.as_json()) == borrowed
    assert borrowed.comes_from("x") and borrowed.comes_from("y") and not row.comes_from("y")


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        '{"id": "a"}',
        ('{"id":"a","source":"s","family":"f","provenance":"real","label":"poetry","lang":"en",'
         '"request":{}}'),
        ('{"id":"a","source":"s","family":"f","provenance":"guessed","label":"chat","lang":"en",'
         '"request":{}}'),
        ('{"id":"a","source":"s","family":"f","provenance":"real","label":"chat","lang":"en",'
         '"request":[]}'),
    ],
)
def test_bad_rows_are_refused(line: str) -> None:
    with pytest.raises(CorpusError):
        from_json(line)


def test_alternate_ends_with_the_user() -> None:
    roles = [m["role"] for m in alternate(["a", "b", "c", "d"])]
    assert roles == ["assistant", "user", "assistant", "user"]
    assert [m["role"] for m in alternate(["a"])] == ["user"]


def test_pick_is_deterministic_and_bounded() -> None:
    items = list(range(100))
    first = pick(items, 10, "seed")
    assert first == pick(items, 10, "seed")
    assert len(first) == 10 and first == sorted(first)
    assert pick(items, 10, "other") != first
    assert pick(items[:5], 10, "seed") == items[:5]

"""Removing one member from JSON text without re-encoding the rest.

Pure. The proxy asks SGLang for `meta_info` (its speculation counts) and must hand the client the
response it would have got without asking: every other byte as the engine wrote it (key order,
spacing, escapes, number spelling), which `json.loads` then `json.dumps` does not preserve.
"""

from __future__ import annotations

import json
from typing import Final

_DECODER: Final = json.JSONDecoder()
_SPACE: Final = " \t\r\n"


def drop_member(text: str, key: str, *, in_arrays: frozenset[str] = frozenset()) -> str | None:
    """`text` (one JSON object) without the member `key` of the top-level object and of the
    objects directly inside its arrays named in `in_arrays`; None when `text` is not a JSON
    object. Everything else is kept byte for byte."""
    stripped = text.lstrip(_SPACE)
    if not stripped.startswith("{"):
        return None
    try:
        _DECODER.raw_decode(stripped)
    except ValueError:
        return None
    spans = _member_spans(text, key, in_arrays)
    out, at = [], 0
    for start, end in spans:
        out.append(text[at:start])
        at = end
    out.append(text[at:])
    return "".join(out)


def _member_spans(text: str, key: str, in_arrays: frozenset[str]) -> list[tuple[int, int]]:
    """Spans to cut: each member with its separating comma (the one before it, or after it
    when it comes first)."""
    spans: list[tuple[int, int]] = []
    # the path of open containers: "{" or "[", and the key the container is the value of
    stack: list[tuple[str, str]] = []
    expect_key, last_key, member_start = False, "", 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            end = _string_end(text, i)
            if expect_key and stack and stack[-1][0] == "{":
                last_key, expect_key = json.loads(text[i:end]), False
                colon = text.index(":", end)
                if last_key == key and _wanted(stack, in_arrays):
                    value_start = _skip_space(text, colon + 1)
                    _, value_end = _DECODER.raw_decode(text, value_start)
                    spans.append(_with_comma(text, member_start, i, value_end))
                    i = value_end
                    continue
                i = colon + 1
                continue
            i = end
            continue
        if ch in "{[":
            stack.append((ch, last_key if stack and stack[-1][0] == "{" else ""))
            expect_key, member_start = ch == "{", i + 1
        elif ch in "}]":
            stack.pop()
        elif ch == "," and stack and stack[-1][0] == "{":
            expect_key, member_start = True, i
        i += 1
    return spans


def _wanted(stack: list[tuple[str, str]], in_arrays: frozenset[str]) -> bool:
    """The top-level object, or an object directly inside one of its `in_arrays`."""
    if len(stack) == 1:
        return True
    return len(stack) == 3 and stack[1][0] == "[" and stack[1][1] in in_arrays


def _with_comma(text: str, member_start: int, key_at: int, value_end: int) -> tuple[int, int]:
    if text[member_start] == ",":  # not the first member: cut from the comma before it
        return member_start, value_end
    after = _skip_space(text, value_end)
    if after < len(text) and text[after] == ",":  # the first member: cut the comma after it
        return key_at, _skip_space(text, after + 1)
    return key_at, value_end  # the only member


def _string_end(text: str, start: int) -> int:
    """Index just past the string literal opening at `start`."""
    i = start + 1
    while True:
        ch = text[i]
        if ch == "\\":
            i += 2
        elif ch == '"':
            return i + 1
        else:
            i += 1


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in _SPACE:
        i += 1
    return i

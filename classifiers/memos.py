"""What the features read from a request's tools and from its ask, and the memos that keep it.

Pure: no I/O, no clock, no globals. Agent loops resend the same tools, the same last user
turn and the tool results so far with every step: `ToolsMemo` and `AskMemo` (each owned by its
caller: the proxy keeps one of each per app) answer for a list, an ask or a piece of material
seen lately from memory, the same numbers as reading it afresh (`tool_facts`, `ask_facts`,
`asked_words`, `copying.quoted`) for less work. Bounded either way.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from classifiers.copying import AskCopy, ask_copy, quoted, reemit_format
from classifiers.text import (
    OVERLAP_TEXT_CAP,
    casual_word_share,
    cjk_share,
    code_fences,
    code_line_share,
    exclaims,
    indented_line_share,
    laughs,
    sample_lines,
    split_identifiers,
    starts_with_code,
    strip_fences,
    words_of,
)

# The tool-overlap feature reads the ask's start (`OVERLAP_TEXT_CAP`) and at most this many
# tools, this much of each.
OVERLAP_TOOLS: Final = 16
OVERLAP_TOOL_CAP: Final = 300
# Tools whose schema size is counted, and how deep into each.
TOOLS_READ: Final = 64
ROUGH_SIZE_DEPTH: Final = 200

_STOP_WORDS: Final = frozenset({
    "the", "and", "for", "with", "this", "that", "from", "what", "can", "you", "please", "are",
    "was", "have", "has", "will", "would", "could", "should", "about", "into", "your", "our",
    "their", "there", "here", "which", "when", "where", "how", "why", "who", "all", "any",
    "some", "not", "but", "its", "it's", "get", "give", "tell", "show", "make", "need", "want",
    "like", "just", "also", "then", "than", "them", "they", "one", "two",
})


@dataclass(frozen=True, slots=True)
class ToolFacts:
    """What the features read from a request's tools alone."""

    schema_chars: int
    described: frozenset[str]  # the words of the tools' names and descriptions


class ToolsMemo:
    """`ToolFacts` of the last few tool lists seen, owned by the caller (the proxy keeps one
    per app; no global). Agent loops send the same tools with every turn: comparing a list with
    one seen before (dict equality, at C speed) costs a fraction of reading it again. Lists too
    big to keep cheaply are read every time. Equality is Python's: a schema that differs only by
    `1` against `1.0` or `true` reuses the other's size, a few characters off a rough size."""

    def __init__(self, size: int = 8, max_chars: int = 200_000) -> None:
        self._entries: deque[tuple[tuple[Mapping[str, Any], ...], ToolFacts]] = deque(maxlen=size)
        self._max_chars = max_chars

    def facts(self, tools: tuple[Mapping[str, Any], ...]) -> ToolFacts:
        for seen, facts in self._entries:
            if seen == tools:
                return facts
        facts = tool_facts(tools)
        if facts.schema_chars <= self._max_chars and len(tools) <= TOOLS_READ:
            self._entries.append((tools, facts))
        return facts


@dataclass(frozen=True, slots=True)
class AskFacts:
    """What the features read from the ask (the last user turn) alone."""

    code_fences: int
    code_line_share: float
    cjk_share: float
    indented_line_share: float
    starts_with_code: bool
    casual_word_share: float
    exclaims: bool
    laughs: bool
    copy: AskCopy  # what it quotes, its edit verb, the edit format it asks for


def ask_facts(text: str) -> AskFacts:
    lines = sample_lines(text)
    return AskFacts(
        code_fences=code_fences(text),
        code_line_share=code_line_share(lines),
        cjk_share=cjk_share(strip_fences(text)),
        indented_line_share=indented_line_share(lines),
        starts_with_code=starts_with_code(text),
        casual_word_share=casual_word_share(text),
        exclaims=exclaims(text),
        laughs=laughs(text),
        copy=ask_copy(text),
    )


def asked_words(text: str) -> frozenset[str]:
    """The ask's words that the tool overlap reads: of its start, less the stop words."""
    return frozenset(words_of(text[:OVERLAP_TEXT_CAP]) - _STOP_WORDS)


class AskMemo:
    """`AskFacts` (and, for requests with tools, `asked_words`) of the last few asks seen, what
    the last few pieces of material quote (`copying.quoted` of a tool result or a set-up turn)
    and whether the last few system prompts ask for a re-emitting edit format, owned by the
    caller (the proxy keeps one per app; no global). An agent loop resends the same system
    prompt, last user turn and tool results so far with every tool result: looking its facts
    up (one hash of the text) costs ~1 us, reading them again ~17 us (~60 us for a pasted 8 KB
    file), its words ~4-10 us more; only the new tool result is read (~15 us). Bounded: `size`
    texts of at most `LAST_USER_CAP` (`MATERIAL_CAP`, `SYSTEM_CAP`) characters in each table
    (least recently used first out)."""

    def __init__(self, size: int = 64) -> None:
        self.facts = functools.lru_cache(maxsize=size)(ask_facts)
        self.words = functools.lru_cache(maxsize=size)(asked_words)
        self.quoted = functools.lru_cache(maxsize=size)(quoted)
        self.formats = functools.lru_cache(maxsize=size)(reemit_format)  # of system prompts

    def __len__(self) -> int:
        return max(self.facts.cache_info().currsize, self.words.cache_info().currsize,
                   self.quoted.cache_info().currsize, self.formats.cache_info().currsize)


def tool_facts(tools: Sequence[Mapping[str, Any]]) -> ToolFacts:
    described = " ".join(_tool_text(t)[:OVERLAP_TOOL_CAP] for t in tools[:OVERLAP_TOOLS])
    return ToolFacts(
        schema_chars=sum(_rough_size(t) for t in tools[:TOOLS_READ]),
        described=frozenset(words_of(split_identifiers(described))) if tools else frozenset(),
    )


def _tool_text(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    node = function if isinstance(function, Mapping) else tool
    name, description = node.get("name"), node.get("description")
    return f"{name if isinstance(name, str) else ''} {description if isinstance(description, str) else ''}"


def _rough_size(node: object, budget: int = 20_000, depth: int = 0) -> int:
    """Characters a JSON value would take, bounded, without serialising it. Nesting past
    `ROUGH_SIZE_DEPTH` counts as the whole budget (no schema nests that deep; the stack could
    not follow)."""
    if depth > ROUGH_SIZE_DEPTH:
        return budget
    if isinstance(node, str):
        return len(node) + 2
    # String members are counted inline (the same sum as the call): most of a schema's nodes
    # are strings, and this runs on every request with tools.
    if isinstance(node, dict):
        total = 2
        for key, value in node.items():
            if type(value) is str:
                total += len(str(key)) + 6 + len(value)
            else:
                total += len(str(key)) + 4 + _rough_size(value, budget - total, depth + 1)
            if total >= budget:
                return budget
        return total
    if isinstance(node, list):
        total = 2
        for value in node:
            total += (3 + len(value) if type(value) is str
                      else 1 + _rough_size(value, budget - total, depth + 1))
            if total >= budget:
                return budget
        return total
    return len(str(node))

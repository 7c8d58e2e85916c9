"""Request features: named numbers read from a `RequestView`.

Pure: no I/O, no clock, no globals. The token counter is passed in (the tokenizer is loaded
once at start-up by the edge), and work is bounded: text features read only the capped text
the view kept, and the prompt's token count is estimated from a bounded sample's
tokens-per-character ratio rather than by tokenizing a 300 KB body.

`FEATURE_NAMES` fixes the order of `Features.vector()`; any change to names, order or meaning
bumps `FEATURE_SCHEMA_VERSION`, and model artifacts refuse to load on a mismatch.
"""

from __future__ import annotations

import contextlib
import functools
import operator
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from classifiers.request_view import RequestView
from classifiers.text import (
    FALLBACK_CHARS_PER_TOKEN,
    OVERLAP_TEXT_CAP,
    casual_word_share,
    cjk_share,
    code_fences,
    code_line_share,
    estimated_tokens,
    exclaims,
    indented_line_share,
    laughs,
    sample_lines,
    split_identifiers,
    starts_with_code,
    strip_fences,
    words_of,
)

FEATURE_SCHEMA_VERSION: Final = 5

# Characters tokenized to estimate the tokens-per-character ratio: tokenizing costs ~0.5 us a
# character, so the sample is small (it only estimates a ratio; the hot path has ~0.3 ms).
TOKEN_SAMPLE_CAP: Final = 192
# The tool-overlap feature reads the ask's start (`OVERLAP_TEXT_CAP`) and at most this many
# tools, this much of each.
OVERLAP_TOOLS: Final = 16
OVERLAP_TOOL_CAP: Final = 300
# Tools whose schema size is counted, and how deep into each.
TOOLS_READ: Final = 64
ROUGH_SIZE_DEPTH: Final = 200

TokenCounter = Callable[[str], int]

_STOP_WORDS: Final = frozenset({
    "the", "and", "for", "with", "this", "that", "from", "what", "can", "you", "please", "are",
    "was", "have", "has", "will", "would", "could", "should", "about", "into", "your", "our",
    "their", "there", "here", "which", "when", "where", "how", "why", "who", "all", "any",
    "some", "not", "but", "its", "it's", "get", "give", "tell", "show", "make", "need", "want",
    "like", "just", "also", "then", "than", "them", "they", "one", "two",
})


@dataclass(frozen=True, slots=True)
class Features:
    """The request features, all numbers (booleans as 0/1) so that a model can read them."""

    n_tools: int
    tool_schema_chars: int
    tool_choice_required: bool
    tool_choice_none: bool
    last_role_tool: bool
    last_role_assistant: bool
    history_has_tool: bool
    n_messages: int
    code_fences: int
    code_line_share: float
    cjk_share: float  # of the last user turn, outside fenced code
    json_mode: bool
    temperature: float  # -1 when the request did not set it
    greedy: bool  # temperature set to <= 0
    thinking: bool  # thinking mode asked for (explicitly or by model alias)
    thinking_unset: bool  # the request said nothing about thinking
    max_tokens: int  # 0 when unset
    prompt_tokens: int  # estimated
    last_user_tokens: int
    system_chars: int
    # Share of the user's words (Latin words, CJK bigrams) found in the tools' names and
    # descriptions: a tool that matches the ask makes a tool call likely (0 without tools).
    tool_text_overlap: float = 0.0
    # Code without fences: share of the ask's lines that are indented (a pasted function
    # body, a docstring), and whether its first line is code (a signature, an import).
    indented_line_share: float = 0.0
    starts_with_code: bool = False
    # Conversational register: share of the ask's words that are pronouns of the two speakers,
    # interjections or casual particles ("I", "you", "lol", "haha", "哈哈", "呢"); small talk is
    # about the speakers, an explanation about a subject, whatever the source.
    casual_word_share: float = 0.0
    # More marks of spoken register, outside fenced code: an exclamation ("so cool!", "太好了！"),
    # and laughter or an emoticon ("haha", "lol", ":)", "哈哈"). Questions and requests for an
    # explanation rarely carry either, whatever their source.
    exclaims: bool = False
    laughs: bool = False

    def as_dict(self) -> dict[str, float | int | bool]:
        # not dataclasses.asdict: it deep-copies each number, on every request
        return dict(zip(FEATURE_NAMES, feature_values(self)))

    @property
    def agent_structure(self) -> bool:
        """Tools attached (and allowed) with tool calls or results earlier in the conversation:
        unambiguously a turn inside an agent's loop, whatever its words read like."""
        return (self.n_tools > 0 and not self.tool_choice_none
                and (self.history_has_tool or self.last_role_tool))

    def vector(self) -> tuple[float, ...]:
        return tuple(map(float, feature_values(self)))


# The measured fields, then the properties derived from them (the model reads both, so that
# it learns what the rules know: a structurally agent turn is an agent turn).
DERIVED_FEATURES: Final = ("agent_structure",)
FEATURE_NAMES: Final = tuple(f.name for f in fields(Features)) + DERIVED_FEATURES

# A `Features`' values in FEATURE_NAMES order (one C call: the hot path reads them all).
feature_values: Final = operator.attrgetter(*FEATURE_NAMES)

# Model aliases that select a mode regardless of other fields (ds4: deepseek-chat is
# non-thinking, deepseek-reasoner thinks).
_NON_THINKING_MODELS: Final = frozenset({"deepseek-chat"})
_THINKING_MODELS: Final = frozenset({"deepseek-reasoner"})


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
    )


def asked_words(text: str) -> frozenset[str]:
    """The ask's words that the tool overlap reads: of its start, less the stop words."""
    return frozenset(words_of(text[:OVERLAP_TEXT_CAP]) - _STOP_WORDS)


class AskMemo:
    """`AskFacts` (and, for requests with tools, `asked_words`) of the last few asks seen,
    owned by the caller (the proxy keeps one per app; no global). An agent loop resends the
    same last user turn with every tool result: looking its facts up (one hash of the text)
    costs ~1 us, reading them again ~17 us, its words ~4-10 us more. Bounded: `size` asks of
    at most `LAST_USER_CAP` characters in each table (least recently used first out)."""

    def __init__(self, size: int = 64) -> None:
        self.facts = functools.lru_cache(maxsize=size)(ask_facts)
        self.words = functools.lru_cache(maxsize=size)(asked_words)

    def __len__(self) -> int:
        return max(self.facts.cache_info().currsize, self.words.cache_info().currsize)


def tool_facts(tools: Sequence[Mapping[str, Any]]) -> ToolFacts:
    described = " ".join(_tool_text(t)[:OVERLAP_TOOL_CAP] for t in tools[:OVERLAP_TOOLS])
    return ToolFacts(
        schema_chars=sum(_rough_size(t) for t in tools[:TOOLS_READ]),
        described=frozenset(words_of(split_identifiers(described))) if tools else frozenset(),
    )


def extract(
    view: RequestView,
    count_tokens: TokenCounter | None = None,
    memo: ToolsMemo | None = None,
    asks: AskMemo | None = None,
) -> Features:
    """The features of one request. `count_tokens` is the tokenizer's counter, if loaded;
    `memo` and `asks` remember what recent tool lists and asks gave (same numbers, less work)."""
    tools = memo.facts(view.tools) if memo is not None else tool_facts(view.tools)
    text = view.last_user_text
    ask = asks.facts(text) if asks is not None else ask_facts(text)
    per_char = _tokens_per_char(text or view.system_text + view.context_tail, count_tokens)
    thinking = _thinking(view)
    return Features(
        n_tools=len(view.tools),
        tool_schema_chars=tools.schema_chars,
        tool_choice_required=view.tool_choice in ("required", "function", "any", "tool"),
        tool_choice_none=view.tool_choice == "none",
        last_role_tool=view.last_role in ("tool", "function"),
        last_role_assistant=view.last_role == "assistant",
        history_has_tool="tool" in view.roles or "function" in view.roles,
        n_messages=len(view.roles),
        code_fences=ask.code_fences,
        code_line_share=ask.code_line_share,
        cjk_share=ask.cjk_share,
        json_mode=view.response_format in ("json_object", "json_schema"),
        temperature=-1.0 if view.temperature is None else view.temperature,
        greedy=view.temperature is not None and view.temperature <= 0.0,
        thinking=thinking is True,
        thinking_unset=thinking is None,
        max_tokens=view.max_tokens or 0,
        prompt_tokens=max(1, round(view.total_chars * per_char)) if view.total_chars else 0,
        last_user_tokens=round(len(text) * per_char),
        system_chars=len(view.system_text),
        tool_text_overlap=(_overlap(asks.words(text) if asks is not None else asked_words(text),
                                    tools.described) if view.tools else 0.0),
        indented_line_share=ask.indented_line_share,
        starts_with_code=ask.starts_with_code,
        casual_word_share=ask.casual_word_share,
        exclaims=ask.exclaims,
        laughs=ask.laughs,
    )


def _overlap(asked: frozenset[str], described: frozenset[str]) -> float:
    if not asked:
        return 0.0
    return round(len(asked & described) / len(asked), 4)


def _tool_text(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    node = function if isinstance(function, Mapping) else tool
    name, description = node.get("name"), node.get("description")
    return f"{name if isinstance(name, str) else ''} {description if isinstance(description, str) else ''}"


def _thinking(view: RequestView) -> bool | None:
    model = view.model.lower()
    if model in _NON_THINKING_MODELS:
        return False
    if view.thinking is not None:
        return view.thinking
    if model in _THINKING_MODELS:
        return True
    return None


def _tokens_per_char(text: str, count_tokens: TokenCounter | None) -> float:
    """Tokens per character of a small sample: the tokenizer's, or a script-based estimate."""
    sample = text[:TOKEN_SAMPLE_CAP]
    if not sample:
        return 1.0 / FALLBACK_CHARS_PER_TOKEN
    if count_tokens is not None:
        with contextlib.suppress(Exception):  # a tokenizer failure never fails a request
            return count_tokens(sample) / len(sample)
    return estimated_tokens(sample) / len(sample)


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

"""Request features: named numbers read from a `RequestView`.

Pure: no I/O, no clock, no globals. The token counter is passed in (the tokenizer is loaded
once at start-up by the edge), and work is bounded: text features read only the capped text
the view kept, and the prompt's token count is estimated from a bounded sample's
tokens-per-character ratio rather than by tokenizing a 300 KB body. What the tools and the ask
alone give is `classifiers.memos`' (remembered when the caller passes its memos), by the
heuristics of `classifiers.text`. The prompt-copy signals (`classifiers.copying`) ride along
in `Features.copy`: `as_dict()` has them (the decision log and the route model read them by
name), the classifier's vector does not.

`FEATURE_NAMES` fixes the order of `Features.vector()`; any change to names, order or meaning
bumps `FEATURE_SCHEMA_VERSION`, and model artifacts refuse to load on a mismatch.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Final

from classifiers.copying import (
    COPY_NAMES,
    NO_COPY,
    AskCopy,
    CopySignals,
    copy_signals,
    copy_values,
    name_sites,
    quoted,
    reemit_format,
)
from classifiers.memos import AskMemo, ToolsMemo, ask_facts, asked_words, tool_facts
from classifiers.request_view import RequestView
from classifiers.text import FALLBACK_CHARS_PER_TOKEN, estimated_tokens

FEATURE_SCHEMA_VERSION: Final = 5

# Characters tokenized to estimate the tokens-per-character ratio: tokenizing costs ~0.5 us a
# character, so the sample is small (it only estimates a ratio; the hot path has ~0.3 ms).
TOKEN_SAMPLE_CAP: Final = 192

TokenCounter = Callable[[str], int]


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
    # How much of the answer the prompt may give (not in the vector: the artifact predates it).
    copy: CopySignals = NO_COPY

    def as_dict(self) -> dict[str, float | int | bool]:
        # not dataclasses.asdict: it deep-copies each number, on every request
        values = dict(zip(FEATURE_NAMES, feature_values(self)))
        values.update(zip(COPY_NAMES, copy_values(self.copy)))
        return values

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
# `copy` is the route model's, beside the vector: the classifier's artifact reads none of it.
OUTSIDE_VECTOR: Final = ("copy",)
FEATURE_NAMES: Final = (tuple(f.name for f in fields(Features) if f.name not in OUTSIDE_VECTOR)
                        + DERIVED_FEATURES)

# A `Features`' values in FEATURE_NAMES order (one C call: the hot path reads them all).
feature_values: Final = operator.attrgetter(*FEATURE_NAMES)

# Model aliases that select a mode regardless of other fields (ds4: deepseek-chat is
# non-thinking, deepseek-reasoner thinks).
_NON_THINKING_MODELS: Final = frozenset({"deepseek-chat"})
_THINKING_MODELS: Final = frozenset({"deepseek-reasoner"})


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
        copy=_copy(view, ask.copy, asks),
    )


def _copy(view: RequestView, ask: AskCopy, asks: AskMemo | None) -> CopySignals:
    """The copy signals: the ask's, what its material quotes and what its system prompt asks
    for (each read once by the memo: an agent loop resends the results so far, one of them
    new, under the same system prompt)."""
    read = asks.quoted if asks is not None else quoted
    material = [read(text, True) for text in view.tool_results]
    material += [read(text, False) for text in view.set_up]
    system = view.system_text
    reemits = ask.reemit_format or (bool(system) and (
        asks.formats(system) if asks is not None else reemit_format(system)))
    sites = 0
    if ask.renamed:  # an agent's ask renames what a tool result or a set-up turn brought
        sites = sum(name_sites(text, ask.renamed) for text in (*view.tool_results, *view.set_up))
    return copy_signals(ask, material, reemits, sites)


def _overlap(asked: frozenset[str], described: frozenset[str]) -> float:
    if not asked:
        return 0.0
    return round(len(asked & described) / len(asked), 4)


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

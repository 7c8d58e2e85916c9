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
import re
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from classifiers.request_view import RequestView

FEATURE_SCHEMA_VERSION: Final = 5

# Characters tokenized to estimate the tokens-per-character ratio: tokenizing costs ~0.5 us a
# character, so the sample is small (it only estimates a ratio; the hot path has ~0.3 ms).
TOKEN_SAMPLE_CAP: Final = 192
# Characters of the last user turn read for the CJK share and the code-line share.
TEXT_SAMPLE_CAP: Final = 2_000
CODE_SAMPLE_CAP: Final = 1_500
# Characters of one line the code-line pattern reads (it backtracks on long prose lines).
CODE_LINE_CAP: Final = 160
# The tool-overlap feature reads this much of the ask and of at most this many tools.
OVERLAP_TEXT_CAP: Final = 500
OVERLAP_TOOLS: Final = 16
OVERLAP_TOOL_CAP: Final = 300
# Tools whose schema size is counted, and how deep into each.
TOOLS_READ: Final = 64
ROUGH_SIZE_DEPTH: Final = 200
# Without a tokenizer: a rough ratio for English/code (CJK is counted per character).
FALLBACK_CHARS_PER_TOKEN: Final = 3.6

TokenCounter = Callable[[str], int]

_CJK = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\u3040-\u30ff\uac00-\ud7af\uf900-\ufaff\u3000-\u303f"
    "\uff00-\uffef]"
)
_LATIN_WORD = re.compile(r"[a-z][a-z0-9]{2,}")
_HAN = re.compile("[\u4e00-\u9fff]")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
_STOP_WORDS: Final = frozenset({
    "the", "and", "for", "with", "this", "that", "from", "what", "can", "you", "please", "are",
    "was", "have", "has", "will", "would", "could", "should", "about", "into", "your", "our",
    "their", "there", "here", "which", "when", "where", "how", "why", "who", "all", "any",
    "some", "not", "but", "its", "it's", "get", "give", "tell", "show", "make", "need", "want",
    "like", "just", "also", "then", "than", "them", "they", "one", "two",
})
_CASUAL_TOKEN = re.compile(r"[a-z']+|[\u4e00-\u9fff]")
_CASUAL_WORDS: Final = frozenset({
    "i", "i'm", "im", "i've", "i'd", "i'll", "me", "my", "mine", "you", "you're", "youre", "u",
    "ur", "your", "yours", "we", "us", "our", "lol", "haha", "hahaha", "lmao", "omg", "hey",
    "hi", "hello", "yeah", "yea", "yep", "nope", "oh", "ah", "wow", "cool", "nice", "awesome",
    "thanks", "thank", "ok", "okay", "sure", "bye", "sorry", "hmm", "well", "really", "too",
    "love", "like", "feel", "fun", "guess", "think", "maybe", "pretty", "gonna", "wanna", "so",
    "我", "你", "咱", "们", "呢", "吧", "啊", "呀", "哈", "嗯", "哦", "嘛", "啦", "喔", "哎",
})
# The same words for ASCII text, by C string methods (a third of the regex's cost): every byte
# that cannot be part of a word becomes a space.
_CASUAL_ASCII: Final = bytes(c if chr(c).isascii() and (chr(c).islower() or chr(c) == "'") else 32
                             for c in range(256))
_CASUAL_WORDS_ASCII: Final = frozenset(w.encode() for w in _CASUAL_WORDS if w.isascii())
_EXCLAMATION = re.compile(r"!+(?=\s|$|[\"')\]])|！")
_LAUGHTER = re.compile(
    r"\b(lol|lmao|rofl|omg|xd|ha(ha)+h?|he(he)+|hah)\b|(?<![\w:])[:;]-?[)(DPp](?!\w)|\^_\^|"
    r"哈哈|呵呵|嘿嘿|嘻嘻|\(\^|😂|😄|😊|🤣",
    re.IGNORECASE,
)
# What `_LAUGHTER` needs somewhere in the text: one of its words (in lower case: "haha" holds
# "hah"), its emoticon without the look-arounds, a caret, or one of its CJK or emoji signs.
# Checking for these costs ~3 us on 500 characters; the pattern itself, which tries its dozen
# alternatives at every position, ~40 us, and matches almost no text.
_LAUGH_WORDS: Final = ("lol", "lmao", "rofl", "omg", "xd", "hah", "hehe")
_LAUGH_SIGNS: Final = ("哈哈", "呵呵", "嘿嘿", "嘻嘻", "😂", "😄", "😊", "🤣")
_EMOTICON: Final = re.compile(r"[:;]-?[)(DPp]", re.IGNORECASE)
_FENCE = re.compile(r"^\s*(```|~~~)", re.MULTILINE)
_CODE_LINE = re.compile(
    r"""(^\s*(def |class |import |from \S+ import|return\b|if\s*\(|for\s*\(|while\s*\(|\#include|
    public |private |func |fn |let |const |var |SELECT |INSERT |UPDATE |CREATE |<\w+[^>]*>|\}|\{)
    |[;{}]\s*$|=>|->|==|!=|\w+\(.*\)\s*[:{;]?\s*$)""",
    re.VERBOSE,
)
_CODE_CHARS: Final = frozenset(";{}(=")
# (the pattern is VERBOSE: its spaces are not part of it, "def " reads "def")
_CODE_STARTS: Final = ("def", "class", "import", "from", "return", "#include", "public",
                       "private", "func", "fn", "let", "const", "var", "SELECT", "INSERT",
                       "UPDATE", "CREATE", "<")

# A first line that is code: a definition, an import, a directive, a signature or a statement.
_CODE_START = re.compile(
    r"\s*(def |class |import |from [\w.]+ import |#include|#!|package |using |func |fn |"
    r"(public|private|static|async|export) |function |const |let |var |@[\w.]+(\(.*\))? *$|"
    r"(SELECT|INSERT|UPDATE|DELETE|CREATE|WITH) |<\?php|<!DOCTYPE|<html|"
    r"[\w.\[\]]+ *= *\S+;?\s*$|[\w.]+\(.*\) *[:;{]? *$)",
    re.MULTILINE,
)


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
    lines = _sample_lines(text)
    return AskFacts(
        code_fences=_code_fences(text),
        code_line_share=_code_line_share(lines),
        cjk_share=cjk_share(strip_fences(text)),
        indented_line_share=_indented_line_share(lines),
        starts_with_code=bool(_CODE_START.match(text[:CODE_LINE_CAP])),
        casual_word_share=casual_word_share(text),
        exclaims=exclaims(text),
        laughs=laughs(text),
    )


def asked_words(text: str) -> frozenset[str]:
    """The ask's words that the tool overlap reads: of its start, less the stop words."""
    return frozenset(_words(text[:OVERLAP_TEXT_CAP]) - _STOP_WORDS)


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
        described=frozenset(_words(_split_identifiers(described))) if tools else frozenset(),
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


def _code_fences(text: str) -> int:
    """Fenced blocks; an unclosed fence still opens one. The pattern (a line-start test at every
    character of up to 8,000) runs only on text that has a fence marker at all."""
    if "```" not in text and "~~~" not in text:
        return 0
    return (len(_FENCE.findall(text)) + 1) // 2


def _overlap(asked: frozenset[str], described: frozenset[str]) -> float:
    if not asked:
        return 0.0
    return round(len(asked & described) / len(asked), 4)


def _words(text: str) -> set[str]:
    lowered = text.lower()
    latin = set(_LATIN_WORD.findall(lowered))
    if lowered.isascii():  # O(1) in CPython: no Han characters to look for
        return latin
    han = "".join(_HAN.findall(lowered))
    return latin | {han[i: i + 2] for i in range(len(han) - 1)}


def _split_identifiers(text: str) -> str:
    """get_weather, getWeather, requests.get -> words."""
    return _CAMEL.sub(" ", text).replace("_", " ").replace(".", " ")


def _tool_text(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    node = function if isinstance(function, Mapping) else tool
    name, description = node.get("name"), node.get("description")
    return f"{name if isinstance(name, str) else ''} {description if isinstance(description, str) else ''}"


def casual_word_share(text: str) -> float:
    """Share of the ask's words (Latin words, Han characters) that mark casual talk (bounded)."""
    sample = text[:OVERLAP_TEXT_CAP].lower()
    if sample.isascii():
        ascii_words = sample.encode().translate(_CASUAL_ASCII).split()
        if not ascii_words:
            return 0.0
        return round(sum(map(_CASUAL_WORDS_ASCII.__contains__, ascii_words)) / len(ascii_words), 4)
    words = _CASUAL_TOKEN.findall(sample)
    if not words:
        return 0.0
    casual = sum(map(_CASUAL_WORDS.__contains__, words))
    return round(casual / len(words), 4)


def exclaims(text: str) -> bool:
    """An exclamation mark that ends a sentence (not `!=` or `!x` in code), outside fences."""
    sample = text[:OVERLAP_TEXT_CAP]
    if "!" not in sample and "！" not in sample:
        return False
    return bool(_EXCLAMATION.search(strip_fences(sample)))


def laughs(text: str) -> bool:
    """Laughter or an emoticon in the ask (outside fences)."""
    sample = strip_fences(text[:OVERLAP_TEXT_CAP])
    return _may_laugh(sample) and bool(_LAUGHTER.search(sample))


def _may_laugh(text: str) -> bool:
    """False only for text `_LAUGHTER` cannot match (most text), which then skips the pattern."""
    if "^" in text or ((":" in text or ";" in text) and _EMOTICON.search(text)):
        return True
    if not text.isascii() and any(sign in text for sign in _LAUGH_SIGNS):
        return True
    lowered = text.lower()
    return any(word in lowered for word in _LAUGH_WORDS)


def strip_fences(text: str) -> str:
    """The text outside fenced code blocks: pasted code does not decide the language."""
    return "".join(text.split("```")[0::2]) if "```" in text else text


def cjk_share(text: str) -> float:
    """Share of CJK characters among the non-space characters of `text` (a bounded sample)."""
    sample = text[:TEXT_SAMPLE_CAP]
    if sample.isascii():  # O(1) in CPython; every CJK range is far outside ASCII
        return 0.0
    letters = len("".join(sample.split()))
    if letters == 0:
        return 0.0
    return round(len(_CJK.findall(sample)) / letters, 4)


def _thinking(view: RequestView) -> bool | None:
    model = view.model.lower()
    if model in _NON_THINKING_MODELS:
        return False
    if view.thinking is not None:
        return view.thinking
    if model in _THINKING_MODELS:
        return True
    return None


def _sample_lines(text: str) -> list[str]:
    """The non-blank lines of the ask's start, which both line shares read."""
    return [line for line in text[:CODE_SAMPLE_CAP].splitlines() if line.strip()]


def _code_line_share(lines: list[str]) -> float:
    if not lines:
        return 0.0
    code = sum(1 for line in lines if _may_be_code(capped := line[:CODE_LINE_CAP])
               and _CODE_LINE.search(capped))
    return round(code / len(lines), 4)


def _may_be_code(line: str) -> bool:
    """False only for a line `_CODE_LINE` cannot match (most prose), which then skips the
    pattern: each of its alternatives needs one of these characters, `->`, or one of these
    starts (`if (`, `for (`, `while (`, `{`, `}` need a character of the set)."""
    return (not _CODE_CHARS.isdisjoint(line) or "->" in line
            or line.lstrip().startswith(_CODE_STARTS))


def _indented_line_share(lines: list[str]) -> float:
    if not lines:
        return 0.0
    return round(sum(1 for line in lines if line[:1] in (" ", "\t")) / len(lines), 4)


def _tokens_per_char(text: str, count_tokens: TokenCounter | None) -> float:
    """Tokens per character of a small sample: the tokenizer's, or a script-based estimate."""
    sample = text[:TOKEN_SAMPLE_CAP]
    if not sample:
        return 1.0 / FALLBACK_CHARS_PER_TOKEN
    if count_tokens is not None:
        with contextlib.suppress(Exception):  # a tokenizer failure never fails a request
            return count_tokens(sample) / len(sample)
    return estimated_tokens(sample) / len(sample)


def estimated_tokens(text: str) -> float:
    """Tokens of `text` by script, without a tokenizer: about one per CJK character, one per
    `FALLBACK_CHARS_PER_TOKEN` characters of other text."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk) / FALLBACK_CHARS_PER_TOKEN


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

"""Text heuristics: what the features read from the ask's words and lines, each bounded.

Pure: no I/O, no clock, no globals (the patterns and word lists are constants). Each function
reads a capped sample of its text, and the expensive patterns run only after a cheap test says
they could match; ASCII text takes C string methods where they give the same numbers.
"""

from __future__ import annotations

import re
from typing import Final

# Characters of the last user turn read for the CJK share and the code-line share.
TEXT_SAMPLE_CAP: Final = 2_000
CODE_SAMPLE_CAP: Final = 1_500
# Characters of one line the code-line pattern reads (it backtracks on long prose lines).
CODE_LINE_CAP: Final = 160
# Characters of the ask read for its words: the tool overlap, the casual share, the spoken marks.
OVERLAP_TEXT_CAP: Final = 500
# Without a tokenizer: a rough ratio for English/code (CJK is counted per character).
FALLBACK_CHARS_PER_TOKEN: Final = 3.6

_CJK = re.compile(
    "[\u4e00-\u9fff\u3400-\u4dbf\u3040-\u30ff\uac00-\ud7af\uf900-\ufaff\u3000-\u303f"
    "\uff00-\uffef]"
)
_LATIN_WORD = re.compile(r"[a-z][a-z0-9]{2,}")
_HAN = re.compile("[\u4e00-\u9fff]")
_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")
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


def estimated_tokens(text: str) -> float:
    """Tokens of `text` by script, without a tokenizer: about one per CJK character, one per
    `FALLBACK_CHARS_PER_TOKEN` characters of other text."""
    cjk = len(_CJK.findall(text))
    return cjk + (len(text) - cjk) / FALLBACK_CHARS_PER_TOKEN


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


def code_fences(text: str) -> int:
    """Fenced blocks; an unclosed fence still opens one. The pattern (a line-start test at every
    character of up to 8,000) runs only on text that has a fence marker at all."""
    if "```" not in text and "~~~" not in text:
        return 0
    return (len(_FENCE.findall(text)) + 1) // 2


def sample_lines(text: str) -> list[str]:
    """The non-blank lines of the ask's start, which both line shares read."""
    return [line for line in text[:CODE_SAMPLE_CAP].splitlines() if line.strip()]


def code_line_share(lines: list[str]) -> float:
    if not lines:
        return 0.0
    return round(sum(map(is_code_line, lines)) / len(lines), 4)


def is_code_line(line: str) -> bool:
    """Whether a line reads as code (its first `CODE_LINE_CAP` characters)."""
    capped = line[:CODE_LINE_CAP]
    return _may_be_code(capped) and _CODE_LINE.search(capped) is not None


def _may_be_code(line: str) -> bool:
    """False only for a line `_CODE_LINE` cannot match (most prose), which then skips the
    pattern: each of its alternatives needs one of these characters, `->`, or one of these
    starts (`if (`, `for (`, `while (`, `{`, `}` need a character of the set)."""
    return (not _CODE_CHARS.isdisjoint(line) or "->" in line
            or line.lstrip().startswith(_CODE_STARTS))


def indented_line_share(lines: list[str]) -> float:
    if not lines:
        return 0.0
    return round(sum(1 for line in lines if line[:1] in (" ", "\t")) / len(lines), 4)


def starts_with_code(text: str) -> bool:
    """Whether the ask's first line is code: a definition, an import, a directive, a signature
    or a statement."""
    return bool(_CODE_START.match(text[:CODE_LINE_CAP]))


def words_of(text: str) -> set[str]:
    """The words the tool overlap compares: Latin words of 3 or more characters, Han bigrams."""
    lowered = text.lower()
    latin = set(_LATIN_WORD.findall(lowered))
    if lowered.isascii():  # O(1) in CPython: no Han characters to look for
        return latin
    han = "".join(_HAN.findall(lowered))
    return latin | {han[i: i + 2] for i in range(len(han) - 1)}


def split_identifiers(text: str) -> str:
    """get_weather, getWeather, requests.get -> words."""
    return _CAMEL.sub(" ", text).replace("_", " ").replace(".", " ")

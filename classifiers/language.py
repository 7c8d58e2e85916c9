"""The language of a request, one rule for every scorer (the trained model and the rules).

Pure: reads the CJK share feature and the first characters of the user's text. A request is
CJK when at least `CJK_SHARE_MIN` of its estimated tokens are CJK; then the script of the
user's text tells Korean (Hangul) and Japanese (kana) from Chinese.
"""

from __future__ import annotations

from typing import Final

from classifiers.features import Features
from classifiers.request_view import RequestView

CJK_SHARE_MIN: Final = 0.15
_LOOK_CHARS: Final = 200  # enough to see the script; cheap on a 300 KB request
_SCRIPT_MIN: Final = 3  # characters of a script that decide ko/ja


def guess_lang(view: RequestView, features: Features) -> str:
    """zh, ja or ko by the script of the user's text when the request is CJK, else en."""
    if features.cjk_share < CJK_SHARE_MIN:
        return "en"
    head = view.last_user_text[:_LOOK_CHARS]
    if sum(1 for ch in head if 0xAC00 <= ord(ch) <= 0xD7AF) >= _SCRIPT_MIN:
        return "ko"
    if sum(1 for ch in head if 0x3040 <= ord(ch) <= 0x30FF) >= _SCRIPT_MIN:
        return "ja"
    return "zh"

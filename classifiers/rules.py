"""A rule-based guess of the workload class: the scorer used when no trained model is loaded.

Pure: reads the features and the view's capped text, returns `Scores`. It is deliberately
simple and transparent; the trained classifier replaces it when its artifact is configured.
"""

from __future__ import annotations

import re
from typing import Final

from classifiers.features import Features
from classifiers.language import guess_lang
from classifiers.request_view import RequestView
from classifiers.scores import CLASSES, Scores

ARTIFACT_NAME: Final = "rules-v1"

_CODE_ASK = re.compile(
    r"\b(write|implement|fix|refactor|complete|convert|generate)\b.{0,40}\b(function|class|code|"
    r"script|program|method|query|sql|regex|test|yaml|json|dockerfile|makefile)\b|"
    r"(写|实现|修复|编写).{0,10}(函数|代码|程序|脚本|类)",
    re.IGNORECASE,
)
_PROSE_ASK = re.compile(
    r"\b(story|poem|haiku|lyrics|essay|novel|letter|email|slogan|tagline|script|fable|"
    r"limerick|sonnet|blog post|marketing|role-?play|screenplay)\b|"
    r"(故事|诗|散文|作文|小说|信|歌词|文案)",
    re.IGNORECASE,
)
_CHAT_TURN = re.compile(
    r"^\s*(hi|hello|hey|thanks|thank you|good (morning|night|evening)|how are you|"
    r"who are you|what'?s up|bye|ok|okay|cool|lol|你好|谢谢|早上好|晚安|再见|你是谁|哈哈)\b",
    re.IGNORECASE,
)


def score(view: RequestView, features: Features) -> Scores:
    """Class probabilities from transparent rules; the top class gets most of the mass."""
    text = view.last_user_text
    top = _guess(text, features)
    return Scores(
        top_class=top,
        lang=guess_lang(view, features),
        scores={c: (0.8 if c == top else 0.05) for c in CLASSES},
        artifact=ARTIFACT_NAME,
    )


def _guess(text: str, f: Features) -> str:
    if (f.n_tools > 0 and not f.tool_choice_none
            and (f.last_role_tool or f.tool_choice_required or not _CHAT_TURN.search(text))):
        return "agent"
    if f.last_role_tool or f.agent_structure:
        return "agent"
    if f.code_fences > 0 or f.code_line_share >= 0.3 or _CODE_ASK.search(text):
        return "code"
    if _PROSE_ASK.search(text):
        return "prose"
    if _CHAT_TURN.search(text) and f.last_user_tokens <= 16:
        return "chat"
    return "technical"

"""One language rule: the rule-based scorer and the trained model say the same language."""

from __future__ import annotations

import pytest

from classifiers import rules
from classifiers.features import extract
from classifiers.language import CJK_SHARE_MIN, guess_lang, lang_of_text
from classifiers.model import DEFAULT_ARTIFACT, load_artifact
from classifiers.request_view import view_request

MIXED = "请解释一下这个函数 def add(a, b): return a + b for the numbers"  # ~0.2 CJK


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("Explain how a hash map resolves collisions.", "en"),
        ("你好，帮我写个故事", "zh"),
        ("これはテストです。日本語で説明してください。", "ja"),
        ("안녕하세요 반갑습니다 설명해 주세요", "ko"),
        (MIXED, "zh"),
    ],
)
def test_every_scorer_uses_the_one_rule(text: str, lang: str) -> None:
    view = view_request("chat", {"messages": [{"role": "user", "content": text}]})
    features = extract(view)
    assert guess_lang(view, features) == lang
    assert rules.score(view, features).lang == lang
    assert load_artifact(DEFAULT_ARTIFACT).score(view, features).lang == lang
    assert lang_of_text(text) == lang  # the corpus labels rows by the same rule


def test_pasted_code_does_not_decide_the_language() -> None:
    text = "这段代码报错了，帮我看看：\n```python\nprint('a long line of english words here')\n```"
    view = view_request("chat", {"messages": [{"role": "user", "content": text}]})
    assert guess_lang(view, extract(view)) == "zh" == lang_of_text(text)


def test_a_request_mostly_in_latin_script_is_english_below_the_share() -> None:
    view = view_request("chat", {"messages": [{"role": "user", "content": MIXED + " x" * 40}]})
    features = extract(view)
    assert features.cjk_share < CJK_SHARE_MIN
    assert guess_lang(view, features) == "en"

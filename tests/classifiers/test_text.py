"""Text heuristics: their cases, and each shortcut against the pattern it stands for."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from classifiers.text import cjk_share


@pytest.mark.parametrize(("text", "expected"), [("", 0.0), ("   ", 0.0), ("ab你好", 0.5)])
def test_cjk_share(text: str, expected: float) -> None:
    assert cjk_share(text) == expected


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("abcIiYyou'lol OK.,!?-_\t\n1\"\u212a哈我呢é")), max_size=60))
def test_text_features_read_ascii_and_other_text_alike(text: str) -> None:
    """ASCII text takes a shortcut (no CJK scan, words by bytes.translate): the same numbers as
    the patterns give on any text."""
    import re

    from classifiers import text as t

    sample = text[: t.OVERLAP_TEXT_CAP].lower()
    words = t._CASUAL_TOKEN.findall(sample)
    casual = round(sum(w in t._CASUAL_WORDS for w in words) / len(words), 4) if words else 0.0
    assert t.casual_word_share(text) == casual
    cjk_sample = text[: t.TEXT_SAMPLE_CAP]
    letters = len("".join(cjk_sample.split()))
    cjk = round(len(t._CJK.findall(cjk_sample)) / letters, 4) if letters else 0.0
    assert t.cjk_share(text) == cjk
    lowered = text.lower()
    han = "".join(re.findall("[\u4e00-\u9fff]", lowered))
    expected = set(t._LATIN_WORD.findall(lowered)) | {han[i: i + 2] for i in range(len(han) - 1)}
    assert t.words_of(text) == expected


_CODE_BITS = ["def", "class", "import", "from", "x", "return", "if", "for", "while", "#include",
              "public", "private", "func", "fn", "let", "const", "var", "SELECT", "CREATE",
              "<div>", "<", "->", "=>", "==", "!=", "f(a)", "define", "letter", "Return", " ",
              "\t", "\u3000", "\u00a0", ";", "{", "}", "(", ")", "=", ":", "#", "-", "a", "."]


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_CODE_BITS), max_size=10).map("".join))
def test_the_code_line_prefilter_never_skips_a_line_the_pattern_matches(line: str) -> None:
    from classifiers import text as t

    if t._CODE_LINE.search(line):
        assert t._may_be_code(line)


_LAUGH_BITS = ["lol", "LOL", "lmao", "rofl", "omg", "OMG", "xd", "XD", "ha", "HA", "h", "he",
               "hah", "HeHe", ":", ";", "-", ")", "(", "D", "P", "p", "d", "^", "_", "^_^", "(^",
               "哈", "哈哈", "呵呵", "嘿嘿", "嘻嘻", "😂", "😄", "😊", "🤣", "```", " ", "\n",
               "a", "x", "1", "é", "Σ", "İ", "K", "ſ", "\ud800", ":-)", ";P", "w"]


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_LAUGH_BITS), max_size=12).map("".join))
def test_laughs_gives_what_the_pattern_alone_gave(text: str) -> None:
    from classifiers import text as t

    # the formula before the prefilter: the pattern over the sample outside fences
    assert t.laughs(text) == bool(t._LAUGHTER.search(t.strip_fences(text[: t.OVERLAP_TEXT_CAP])))


def test_the_laugh_prefilter_lowers_every_letter_the_pattern_folds() -> None:
    """The prefilter looks for the pattern's words in `text.lower()`: sound only if every
    character the case-insensitive pattern takes for one of its letters lowers to that letter."""
    import re

    from classifiers import text as t

    letters = set("".join(t._LAUGH_WORDS)) | set("lmaorfgxdhe")
    everything = "".join(map(chr, range(0x110000)))
    folded = re.findall(f"(?i)[{''.join(sorted(letters))}]", everything)
    assert folded  # the ASCII letters themselves, at least
    assert {c.lower() for c in folded} <= letters

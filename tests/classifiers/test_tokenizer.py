"""The token counter: the DeepSeek tokenizer's count (ASCII text piece by piece, its
pre-tokenizer replayed), remembered for recent texts."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from classifiers.tokenizer import (
    COUNT_MEMO_SIZE,
    AsciiPieces,
    load_counter,
    replayable,
    tokenizer_path,
)

TEXTS = ["Explain how a hash map resolves collisions.", "什么是量子计算？", "def f(x):\n    return x",
         "", "mixed 中文 and English ```code```"]


@functools.cache
def _tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_path()))


@functools.cache
def _counter() -> Any:
    return load_counter()


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return _tokenizer()


def test_counts_are_the_tokenizers_the_first_time_and_every_time_after(tokenizer: Tokenizer) -> None:
    count = load_counter()
    for _ in range(3):
        for text in TEXTS:
            assert count(text) == len(tokenizer.encode(text, add_special_tokens=False).ids)


def test_a_lone_surrogate_is_counted_as_a_replacement_character(tokenizer: Tokenizer) -> None:
    count = load_counter()
    assert count("ab\ud800cd") == len(tokenizer.encode("ab\ufffdcd", add_special_tokens=False).ids)
    assert count("ab\ud800cd") == count("ab\ud800cd")


def test_the_memo_of_recent_texts_is_bounded() -> None:
    count: Any = load_counter()
    for n in range(COUNT_MEMO_SIZE * 3):
        count(f"question {n}")
    assert count.cache_info().currsize == COUNT_MEMO_SIZE
    assert count("question 0") == count("question 1")  # evicted long ago: counted again, the same


# --- ASCII text counted piece by piece (the pre-tokenizer replayed) --------------------------

_ASCII_BITS = ["a", "Ab", "hash", "Explain", "x1", "9", "1234567", " ", "  ", "\t", "\n", "\r\n",
               "\n\n", " \n", ".", "...", "'s", "(", ")", "{", "}", "_", "-", "->", ":", "\"",
               "`", "$", "~", "#", "@", "/", "\\", "="]
_OTHER_BITS = ["<", "<think>", "<|EOT|>", "\x0b", "\x0c", "\x1c", "\x00", "\x7f", "é", "中文",
               "１２", "\u00a0", "\u2028"]


@functools.cache
def _replay() -> AsciiPieces:
    assert replayable(_tokenizer())
    return AsciiPieces(_tokenizer())


def _same_pieces_and_count(text: str) -> None:
    tokenizer = _tokenizer()
    assert tokenizer.pre_tokenizer is not None
    cut = tokenizer.pre_tokenizer.pre_tokenize_str(text)
    assert _replay().pieces(text) == [text[start:end] for _, (start, end) in cut]
    assert _replay().count(text) == len(tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("text", [
    "Question 1234: Explain how a hash map resolves collisions. " * 3,
    "def f(x):\n    return x  # it's 42\r\n\r\n\tprint(f'{x!r}')\n",
    "  leading and trailing spaces  ", "1 2  3   4\n5", "a\n\n\n b", "it's 3.14159, isn't it?",
])
def test_ascii_text_is_cut_where_the_tokenizer_cuts_it(text: str) -> None:
    _same_pieces_and_count(text)


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_ASCII_BITS), max_size=24).map("".join))
def test_any_ascii_text_is_cut_and_counted_as_the_tokenizer_does(text: str) -> None:
    _same_pieces_and_count(text)


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(_ASCII_BITS + _OTHER_BITS), max_size=16).map("".join))
def test_text_the_replay_does_not_read_is_the_tokenizers_whole(text: str) -> None:
    if any(bit in text for bit in _OTHER_BITS):
        assert _replay().pieces(text) is None  # an added token's start, a control, non-ASCII
    assert _counter()(text) == len(_tokenizer().encode(text, add_special_tokens=False).ids)


def test_another_pre_tokenizer_is_not_replayed(tmp_path: Path) -> None:
    from tokenizers import models, pre_tokenizers

    other = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    other.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not replayable(other)
    path = tmp_path / "tokenizer.json"
    other.save(str(path))
    assert load_counter(path)("ab ab") == len(other.encode("ab ab").ids)

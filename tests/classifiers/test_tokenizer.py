"""The token counter: the DeepSeek tokenizer's count, remembered for recent texts."""

from __future__ import annotations

from typing import Any

import pytest
from tokenizers import Tokenizer

from classifiers.tokenizer import COUNT_MEMO_SIZE, load_counter, tokenizer_path

TEXTS = ["Explain how a hash map resolves collisions.", "什么是量子计算？", "def f(x):\n    return x",
         "", "mixed 中文 and English ```code```"]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(tokenizer_path()))


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

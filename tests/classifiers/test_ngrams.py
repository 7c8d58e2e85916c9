"""Hashed n-grams: deterministic, bounded, separate buckets per field."""

from __future__ import annotations

import numpy as np
import pytest

from classifiers.ngrams import HashSettings, field_indices, fields, hashed
from classifiers.request_view import view_request

SETTINGS = HashSettings()


def _view(text: str, **extra: object) -> object:
    return view_request("chat", {"messages": [{"role": "user", "content": text}], **extra})


def test_indices_are_stable_and_in_range() -> None:
    a = field_indices("Hello 世界", 1, SETTINGS)
    b = field_indices("Hello 世界", 1, SETTINGS)
    assert np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < SETTINGS.dim
    # 8 characters: 8 unigrams + 7 bigrams + 6 trigrams + 5 four-grams
    assert a.size == 8 + 7 + 6 + 5


def _one_gram_at_a_time(text: str, seed: int, settings: HashSettings) -> list[int]:
    """The scheme's definition: each n-gram's characters folded FNV-style into the field's
    basis, the n-grams of each order in turn, lowest first."""
    codes = [ord(c) for c in " ".join(text.lower().split())]
    out = []
    for order in sorted(settings.orders):
        for start in range(len(codes) - order + 1):
            h = 2166136261 + 97 * seed
            for code in codes[start:start + order]:
                h = ((h ^ code) * 0x01000193) % 2**32
            out.append(h % settings.dim)
    return out


@pytest.mark.parametrize("settings", [SETTINGS, HashSettings(dim=1000), HashSettings(orders=(3, 1)),
                                      HashSettings(orders=(4,), dim=1 << 12)])
@pytest.mark.parametrize("text", ["", " ", "a", "ab c", "Hello   World", "Hello 世界",
                                  "lone \ud800 surrogate", "x" * 50])
def test_each_index_is_its_ngram_hashed(settings: HashSettings, text: str) -> None:
    for seed in (1, 5):
        indices = field_indices(text, seed, settings)
        assert indices.dtype == np.int64
        assert indices.tolist() == _one_gram_at_a_time(text, seed, settings)


def test_fields_hash_into_different_buckets() -> None:
    assert not np.array_equal(field_indices("same text", 1, SETTINGS),
                              field_indices("same text", 2, SETTINGS))


def test_case_and_whitespace_do_not_matter() -> None:
    assert np.array_equal(field_indices("Hello   World", 1, SETTINGS),
                          field_indices("hello world", 1, SETTINGS))


def test_work_is_bounded_for_huge_turns() -> None:
    view = _view("x" * 300_000)
    user, _, _, _ = fields(view, SETTINGS)  # type: ignore[arg-type]
    assert len(user) <= SETTINGS.user_head + SETTINGS.user_tail + 1
    idx, weights = hashed(view, SETTINGS)  # type: ignore[arg-type]
    assert idx.size == weights.size <= 4 * (SETTINGS.user_head + SETTINGS.user_tail + 1)
    # each field's weights are 1/sqrt(n): the field's squared weights sum to 1
    assert abs(float(np.sum(weights**2)) - 1.0) < 1e-3


def test_tool_names_are_a_field() -> None:
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
    plain, with_tools = _view("hi"), _view("hi", tools=tools)
    assert hashed(with_tools, SETTINGS)[0].size > hashed(plain, SETTINGS)[0].size  # type: ignore[arg-type]

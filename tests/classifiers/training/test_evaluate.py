"""Evaluation: the headline macro-F1 of a left-out source counts classes with enough rows, and
the Chinese figure pools the left-out sources' Chinese rows."""

from __future__ import annotations

import numpy as np

from classifiers.scores import CLASSES
from classifiers.training import evaluate as ev
from classifiers.training.data.rows import Row, chat, user


def _labels(*names: str) -> ev.Labels:
    return np.array([CLASSES.index(n) for n in names], dtype=np.int64)


def test_a_class_with_few_rows_does_not_enter_the_headline_macro_f1() -> None:
    truth = _labels(*["agent"] * 20, *["chat"] * 2)
    predicted = _labels(*["agent"] * 20, *["agent"] * 2)
    result = ev.scores_of(truth, predicted)
    assert result["macro_f1_supported"] > 0.95  # agent only: chat has 2 < MIN_SUPPORT rows
    assert result["macro_f1"] < 0.5  # every class present: chat's F1 of 0 counts


def _row(i: int, source: str, label: str, lang: str) -> Row:
    return Row(id=f"{source}/{i}", source=source, family=f"{source}/b0", provenance="real",
               label=label, lang=lang, request=chat([user(str(i))]))


def test_leave_one_source_out_trains_without_the_source_and_pools_chinese() -> None:
    rows = ([_row(i, "a", "chat", "zh") for i in range(12)]
            + [_row(i, "b", "code", "en") for i in range(12)]
            + [_row(i, "c", "technical", "zh") for i in range(12)]
            + [_row(i, "d", "prose", "en") for i in range(12)])
    labels = np.array([CLASSES.index(r.label) for r in rows], dtype=np.int64)
    seen: list[set[str]] = []

    def train_and_predict(train: ev.Mask, test: ev.Mask) -> ev.Labels:
        seen.append({r.source for r, m in zip(rows, train) if m})
        return np.full(int(test.sum()), CLASSES.index("chat"), dtype=np.int64)

    loso = ev.leave_one_source_out(rows, train_and_predict, labels, lambda _: None)
    assert [len(s) for s in seen] == [3, 3, 3, 3]
    assert set(ev.sources_of(loso)) == {"a", "b", "c", "d"}
    assert loso["a"]["macro_f1_supported"] == 1.0 and loso["b"]["macro_f1_supported"] == 0.0
    summary = loso["summary"]
    assert summary["min"] == 0.0 and summary["mean"] == 0.25
    assert summary["zh"]["n"] == 24  # sources a and c, each scored without itself
    assert summary["zh"]["accuracy"] == 0.5


def test_leaving_a_source_out_also_leaves_out_rows_that_borrowed_from_it() -> None:
    rows = ([_row(i, "a", "chat", "en") for i in range(12)]
            + [_row(i, "b", "code", "en") for i in range(12)]
            + [_row(i, "c", "technical", "en") for i in range(12)]
            + [_row(i, "d", "prose", "en") for i in range(12)])
    borrowed = Row(id="a/0#tools", source="a", family="a/b0", provenance="derived", label="chat",
                   lang="en", request=chat([user("0")]), also_from=("b",))
    rows.append(borrowed)
    labels = np.array([CLASSES.index(r.label) for r in rows], dtype=np.int64)
    trained_on: dict[str, list[str]] = {}

    def train_and_predict(train: ev.Mask, test: ev.Mask) -> ev.Labels:
        left_out = rows[int(np.flatnonzero(test)[0])].source
        trained_on[left_out] = [r.id for r, m in zip(rows, train) if m]
        return np.full(int(test.sum()), CLASSES.index("chat"), dtype=np.int64)

    ev.leave_one_source_out(rows, train_and_predict, labels, lambda _: None)
    assert "a/0#tools" not in trained_on["b"]  # it holds b's material (its tools)
    assert "a/0#tools" not in trained_on["a"]
    assert "a/0#tools" in trained_on["c"]

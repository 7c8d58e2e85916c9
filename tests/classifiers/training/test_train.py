"""Training helpers: p_spec refinement from logged outcomes, report writing."""

from __future__ import annotations

from pathlib import Path

import pytest

from classifiers.scores import CLASS_SPEC_PRIOR, CLASSES
from classifiers.training.outcomes import LoggedOutcome
from classifiers.training.train import PRIOR_STRENGTH, class_values


def _outcome(cls: str, profile: str, acceptance: float | None, tps: float | None
             ) -> LoggedOutcome:
    return LoggedOutcome(features={}, top_class=cls, lang="en", profile=profile,
                         acceptance=acceptance, decode_tps=tps)


def test_without_logs_values_are_the_prior() -> None:
    values = class_values([], pays_at=0.5)
    assert [round(float(v), 4) for v in values] == [CLASS_SPEC_PRIOR[c] for c in CLASSES]


def test_measured_acceptance_moves_a_class() -> None:
    outcomes = [_outcome("chat", "mtp", 0.9, 30.0)] * 20
    values = dict(zip(CLASSES, class_values(outcomes, pays_at=0.5)))
    expected = (CLASS_SPEC_PRIOR["chat"] * PRIOR_STRENGTH + 20) / (PRIOR_STRENGTH + 20)
    assert values["chat"] == pytest.approx(expected)
    assert values["code"] == pytest.approx(CLASS_SPEC_PRIOR["code"])


def test_tokens_per_second_decide_without_acceptance() -> None:
    outcomes = [_outcome("prose", "plain", None, 20.0)] * 5
    outcomes += [_outcome("prose", "mtp", None, 15.0)] * 30  # slower than plain: never pays
    values = dict(zip(CLASSES, class_values(outcomes, pays_at=0.5)))
    assert values["prose"] < CLASS_SPEC_PRIOR["prose"] / 2


def test_report_is_written(tiny_artifact: Path) -> None:
    report = tiny_artifact.with_name("tiny.report.md")
    png = tiny_artifact.with_name("tiny.confusion.png")
    assert report.read_text().startswith("# Workload classifier `lr-")
    assert "heldout_real" in report.read_text()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

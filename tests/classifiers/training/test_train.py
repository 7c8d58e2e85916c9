"""Training helpers: report writing."""

from __future__ import annotations

from pathlib import Path


def test_report_is_written(tiny_artifact: Path) -> None:
    report = tiny_artifact.with_name("tiny.report.md")
    png = tiny_artifact.with_name("tiny.confusion.png")
    assert report.read_text().startswith("# Workload classifier `lr-")
    assert "heldout_real" in report.read_text()
    assert "p_spec" not in report.read_text()  # the classifier no longer estimates it
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""bench.decision_idle: the decision timed back to back and after idling, in one table."""

from __future__ import annotations

import re
import time

import pytest

from bench import decision_idle


def test_timed_counts_the_decision_not_the_idle_gap() -> None:
    def decide(_: int) -> None:
        time.sleep(0.001)

    # each decision sleeps 1 ms; the 5 ms idle before it is not counted
    assert 0.9 <= decision_idle.timed(decide, 10, idle_s=0.005) < 5.0


def test_the_table_has_both_asks_and_every_gap(capsys: pytest.CaptureFixture[str]) -> None:
    decision_idle.main(["--requests", "20", "--idle-ms", "0.5", "1"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 1 KB")]
    assert [row.split("|")[1].strip() for row in rows] == [
        "1 KB, the ask repeated", "1 KB, a new ask each"]
    for row in rows:
        cells = row.split("|")[2:-1]
        assert len(cells) == 3
        assert float(cells[0]) > 0
        assert all(re.fullmatch(r" [0-9.]+ \([0-9.]+x\) ", cell) for cell in cells[1:])

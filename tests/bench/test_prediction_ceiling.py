"""bench.prediction_ceiling: the least error a fit of each request's time reaches on a log."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bench.arms import Served
from bench.arms_batch import batch_row, format_batch
from bench.prediction_ceiling import (
    FUTURE,
    KNOWN,
    ONLINE_FIRST,
    ceiling,
    composition,
    hindsight_errors,
    lived_requests,
    log_ceiling,
    main,
    online_errors,
)
from decisionlog.records import Outcome, RouteRecord, to_json

EPOCH = datetime(2026, 12, 6, tzinfo=UTC)


def _record(rid: str, instance: str, cls: str, start_s: float, total_ms: float, *,
            tokens: int = 100, batch_start: int | None = None, batch_mean: float | None = None,
            reason: str = "finish", error: str = "") -> RouteRecord:
    end = EPOCH + timedelta(seconds=start_s + total_ms / 1000.0)  # a record is written at the end
    return RouteRecord(
        ts=end.isoformat(timespec="milliseconds").replace("+00:00", "Z"), request_id=rid,
        endpoint="chat", model="m", stream=False, conversation="", features={},
        classifier={"class": cls}, decision={"reason": reason, "queue_ms": 0.0,
                                             "service_ms": total_ms},
        outcome=Outcome(status=502 if error else 200, error=error, backend=instance,
                        total_ms=total_ms, completion_tokens=tokens, batch_start=batch_start,
                        batch_mean=batch_mean),
        overhead_ms=0.1)


def _grown_batches() -> list[RouteRecord]:
    """Each request's ms per token is its level x its mean batch exactly; the batch each joined
    says little of it (it grew or shrank after)."""
    levels = {("plain", "prose"): 40.0, ("plain", "code"): 50.0, ("ngram", "code"): 25.0,
              ("ngram", "prose"): 45.0}
    records = []
    for i in range(40):
        instance, cls = list(levels)[i % 4]
        joined, lived = 1 + i % 3, 1.0 + (i * 7 % 11) / 4.0
        records.append(_record(f"r{i}", instance, cls, 100.0 * i,
                               100 * levels[instance, cls] * lived,
                               batch_start=joined, batch_mean=lived))
    return records


def test_the_fit_with_the_batch_each_request_ran_in_finds_its_time_exactly() -> None:
    lived = lived_requests(_grown_batches())
    judged = {r.request_id for r in lived}
    assert max(hindsight_errors(lived, FUTURE, judged)) == pytest.approx(0.0, abs=1e-9)
    known = hindsight_errors(lived, KNOWN, judged)
    assert len(known) == 40 and sorted(known)[20] > 0.05  # the batch joined is not enough


def test_a_requests_life_ends_at_its_record_and_the_others_are_counted_over_it() -> None:
    records = [_record("a", "plain", "code", 0.0, 10_000.0, batch_start=1, batch_mean=1.0),
               _record("b", "ngram", "code", 2.0, 4_000.0),  # within a's life
               _record("c", "ngram", "code", 5.0, 10_000.0),  # from a's middle on
               _record("d", "plain", "code", 1.0, 1_000.0)]  # a's own instance: not another
    lived = {r.request_id: r for r in lived_requests(records)}
    a = lived["a"]
    assert (a.start, a.end) == pytest.approx((EPOCH.timestamp(), EPOCH.timestamp() + 10.0))
    assert a.others_start == 0.0  # none had started on another instance when a did
    assert a.others_mean == pytest.approx((4.0 + 5.0) / 10.0)
    assert lived["c"].others_start == 1.0  # a was running on plain
    assert lived["b"].batch_start == 1.0 and lived["b"].batch_mean == 1.0  # none logged: 1


def test_the_probes_and_the_failed_requests_are_not_fitted() -> None:
    records = [_record("p", "plain", "code", 0.0, 1000.0, reason="probe"),
               _record("f", "plain", "code", 1.0, 1000.0, error="refused"),
               _record("z", "plain", "code", 2.0, 1000.0, tokens=0),
               _record("ok", "plain", "code", 3.0, 1000.0)]
    assert [r.request_id for r in lived_requests(records)] == ["ok"]


def test_the_online_fit_predicts_each_request_from_those_ended_before_it() -> None:
    # every request on an instance and class takes the same time: once one of its kind and
    # ONLINE_FIRST in all have ended, the online fit has it exactly
    records = [_record(f"r{i}", "plain" if i % 2 else "ngram", "code", 10.0 * i,
                       3000.0 if i % 2 else 1500.0) for i in range(20)]
    lived = lived_requests(records)
    errors = online_errors(lived, KNOWN, {r.request_id for r in lived})
    assert len(errors) == 20 - ONLINE_FIRST  # the first ONLINE_FIRST had too little before them
    assert max(errors) == pytest.approx(0.0, abs=1e-9)
    assert online_errors(lived, KNOWN, {"r3"}) == []  # judged only where asked (and too early)


def test_the_ceiling_is_judged_on_the_measured_requests_of_a_log(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(to_json(r) + "\n" for r in _grown_batches()))
    served = [Served(i, "edit", "plain", 0.0, 1.0, request_id=f"r{i}") for i in range(30, 40)]
    bounds = log_ceiling(log, served)
    assert bounds is not None and bounds.known.n == 10 and bounds.future.n == 10
    assert bounds.future.p90 == pytest.approx(0.0, abs=1e-9)
    assert bounds.online is not None and bounds.online.n == 10
    assert log_ceiling(tmp_path / "none.jsonl", served) is None
    assert ceiling([], {"r1"}) is None
    row = batch_row("4 clients", 4, {"auto": 10.0, "plain": 12.0, "least-conn": 11.0},
                    ("plain",), served, frozenset(), None, None, ceiling=bounds)
    printed = format_batch([row])
    assert "with the future" in printed and "0%/0% (10)" in printed


def test_the_command_reports_each_log_and_refuses_a_missing_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(to_json(r) + "\n" for r in _grown_batches()))
    assert main([str(log)]) == 0
    out = capsys.readouterr().out
    assert "40 answered requests on 2 instances" in out
    assert "the router's prediction          median 0%" in out  # it predicted each total
    assert "hindsight fit, with the future   median 0%" in out
    assert "its route model, replayed        median" in out  # bench.route_replay's
    assert main([str(log), "--prior", "gb10-ds4"]) == 0
    with pytest.raises(SystemExit):
        main([str(log), "--prior", "no-such-machine"])
    capsys.readouterr()
    assert main([str(tmp_path / "nope.jsonl")]) == 2
    assert "no such log" in capsys.readouterr().err


def test_the_fits_slopes_are_per_instance() -> None:
    # plain pays its batch in full, ngram not at all: one slope for both would miss each
    records = [_record(f"r{i}", "plain" if i % 2 else "ngram", "code", 100.0 * i,
                       100 * 30.0 * (b if i % 2 else 1.0), batch_start=int(b), batch_mean=b)
               for i, b in enumerate([1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0] * 2)]
    lived = lived_requests(records)
    errors = hindsight_errors(lived, KNOWN[:1], {r.request_id for r in lived})
    assert max(errors) == pytest.approx(0.0, abs=1e-9)
    assert math.isfinite(sum(errors))


def _beside_edits() -> list[RouteRecord]:
    """A story takes twice its time beside a copy edit and its time alone beside another story
    (n-gram drafting for the edit): every story runs in a batch of 2, so the batch's size says
    nothing of which."""
    records = []
    for i in range(4):
        at = 20.0 * i
        records.append(_record(f"e{i}", "ngram", "code", at, 5_000.0, batch_mean=1.8))
        records.append(_record(f"s{i}", "ngram", "prose", at + 1.0, 4_000.0, batch_start=2,
                               batch_mean=2.0))  # within the edit's life
        for pair in "pq":  # two stories side by side, after the edit
            records.append(_record(f"{pair}{i}", "ngram", "prose", at + 10.0, 2_000.0,
                                   batch_start=2, batch_mean=2.0))
    return records


def test_the_classes_beside_a_request_on_its_instance_are_counted_at_its_start_and_over_it(
        ) -> None:
    records = [_record("a", "ngram", "prose", 0.0, 10_000.0),
               _record("b", "ngram", "code", 2.0, 4_000.0),  # beside a from 2 s to 6 s
               _record("c", "ngram", "code", -1.0, 2_000.0),  # beside a from its start to 1 s
               _record("d", "plain", "code", 1.0, 5_000.0)]  # another instance: not beside
    lived = {r.request_id: r for r in lived_requests(records)}
    a = lived["a"]
    assert a.beside("code", future=False) == 1.0  # c ran when a started
    assert a.beside("code", future=True) == pytest.approx((4.0 + 1.0) / 10.0)
    assert a.beside("prose", future=True) == 0.0
    assert lived["b"].beside("prose", future=False) == 1.0
    assert a.others_start == 0.0 and a.others_mean == pytest.approx(0.5)  # d, half a's life


def test_the_batchs_classes_explain_what_its_size_cannot() -> None:
    lived = lived_requests(_beside_edits())
    judged = {r.request_id for r in lived}
    classes = {r.cls for r in lived}
    by_class = hindsight_errors(lived, composition(classes, future=True), judged)
    assert max(by_class) == pytest.approx(0.0, abs=1e-9)
    by_size = hindsight_errors(lived, FUTURE, judged)
    assert max(by_size) > 0.2  # a story beside an edit and one beside a story look alike
    assert len(composition(classes, future=False)) == 2  # one column per class


def test_the_command_reports_the_fits_on_the_batchs_classes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "decisions.jsonl"
    log.write_text("".join(to_json(r) + "\n" for r in _beside_edits()))
    assert main([str(log)]) == 0
    lines = capsys.readouterr().out.splitlines()
    future = lines.index(next(line for line in lines if "with the future" in line))
    assert "the batch's classes instead    median 0%" in lines[future + 1]

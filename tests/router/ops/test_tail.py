"""`specroute tail`: readable lines, filters, --json, follow across rotation, live summary."""

from __future__ import annotations

import argparse
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from decisionlog.records import RouteRecord, to_json
from decisionlog.writer import DecisionLog
from router.ops.ops_commands import register
from router.ops.tail import RecordFilter, Tail, TailOptions, format_record
from tests.decisionlog.examples import make_record


def test_format_record_shows_one_readable_line() -> None:
    record = make_record(cls="agent", lang="zh", reason="learned", ts="2026-11-29T12:34:56+00:00",
                         ttft_ms=123.4, tokens=256, tps=31.25, draft_n=100, accepted=93,
                         explored=True)
    line = format_record(record)
    for part in ("12:34:56", "agent/zh", "mtp", "learned*", "mtp-0", "ttft   123ms",
                 "tok   256", "31.2 tok/s", "acc 0.93"):
        assert part in line
    assert "\n" not in line


def test_format_record_names_the_speculation_config() -> None:
    """An n-gram instance's profile is `mtp` (the shorthand for any instance that speculates);
    its line says `ngram-simple`. A record from before configs were logged shows its profile."""
    ngram = format_record(make_record(backend="ngram-0", profile="mtp", spec="ngram-simple"))
    assert "ngram-simple" in ngram.split() and "mtp" not in ngram.split()
    plain = format_record(make_record(profile="plain", spec="plain"))
    assert "plain" in plain.split()
    older = format_record(make_record(profile="mtp"))
    assert "mtp" in older.split()


def test_format_record_shows_failures_and_missing_values() -> None:
    record = make_record(profile="plain", status=502, error="backend died", tps=None,
                         tokens=None, ttft_ms=None, failover_from=("mtp-0",))
    line = format_record(record)
    assert "status 502 backend died" in line and "failover from mtp-0" in line
    assert "ttft       -" in line and "acc    -" in line


@pytest.mark.parametrize(
    ("record_filter", "expected"),
    [
        (RecordFilter(), True),
        (RecordFilter(classes=frozenset({"code"})), True),
        (RecordFilter(classes=frozenset({"chat", "agent"})), False),
        (RecordFilter(langs=frozenset({"en"}), backends=frozenset({"mtp-0"})), True),
        (RecordFilter(langs=frozenset({"en"}), backends=frozenset({"plain-0"})), False),
        (RecordFilter(reasons=frozenset({"sampled"})), False),
    ],
)
def test_filters(record_filter: RecordFilter, expected: bool) -> None:
    assert record_filter.matches(make_record(cls="code", lang="en", reason="learned")) is expected


def _log(path: Path, records: list[RouteRecord], junk: tuple[str, ...] = ()) -> None:
    with DecisionLog(path) as log:
        for record in records:
            log.write_record(record)
        for line in junk:
            log.write(line)


def test_history_keeps_the_last_matching_lines_and_counts_skips(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    records = [make_record(cls="code" if i % 2 else "chat", request_id=f"r{i}") for i in range(6)]
    _log(path, records, junk=("garbage", json.dumps({"schema_version": 7})))
    out, err = io.StringIO(), io.StringIO()
    options = TailOptions(str(path), lines=2, record_filter=RecordFilter(classes=frozenset({"code"})))
    assert Tail(options, out, err).run() == 0
    assert out.getvalue().splitlines() == [format_record(records[3]), format_record(records[5])]
    assert "1 malformed lines skipped" in err.getvalue()
    assert "1 lines of unknown schema_version 7 skipped" in err.getvalue()


def test_json_passes_matching_lines_through(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    records = [make_record(backend="plain-0", profile="plain"), make_record(request_id="m")]
    _log(path, records)
    out = io.StringIO()
    options = TailOptions(str(path), json=True, record_filter=RecordFilter(
        backends=frozenset({"mtp-0"})))
    Tail(options, out, io.StringIO()).run()
    assert out.getvalue() == to_json(records[1]) + "\n"


def test_follow_prints_new_lines_across_rotation_with_a_live_summary(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    line_mb = (len(to_json(make_record())) + 1) / (1024 * 1024)
    log = DecisionLog(path, rotate_mb=2.5 * line_mb, keep=3)
    log.write_record(make_record(request_id="history", tps=12.0))
    arrivals = [
        [make_record(request_id="a", draft_n=10, accepted=9, tps=12.0)],
        [make_record(request_id=f"b{i}", profile="plain", tps=10.0) for i in range(4)],  # rotates
        [],
    ]
    polls = 0

    def next_poll(_: float) -> None:
        nonlocal polls
        for record in arrivals[polls]:
            log.write_record(record)
        polls += 1

    out = io.StringIO()
    options = TailOptions(str(path), lines=5, follow=True, live_summary=True)
    Tail(options, out, io.StringIO()).run(stop=lambda: polls >= len(arrivals), sleep=next_poll)
    log.close()
    text = out.getvalue()
    printed = [line for line in text.splitlines() if " tok/s " in line and "-0 " in line]
    assert len(printed) == 6  # history + a + four b's, none lost in the rotation
    assert "\x1b[" in text and "\x1b[J" in text  # the summary block is redrawn in place
    last_block = text.rsplit("-- per class", 1)[1]
    code_row = next(line for line in last_block.splitlines() if line.startswith("code"))
    assert code_row.split()[:4] == ["code", "6", "33%", "0.90"]
    assert "1.20x" in code_row  # 12 tok/s on mtp over 10 on plain


def test_tail_command_via_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command", required=True))
    path = tmp_path / "d.jsonl"
    _log(path, [make_record(cls="code"), make_record(cls="chat", lang="de")])
    args = parser.parse_args(["tail", str(path), "-n", "5", "--lang", "de"])
    assert args.func(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "chat/de" in lines[0]
    args = parser.parse_args(["tail", str(tmp_path / "missing.jsonl")])
    assert args.func(args) == 2
    with pytest.raises(SystemExit):
        parser.parse_args(["tail", "-n", "-1"])


def test_format_record_names_a_named_pool_and_the_rewrite() -> None:
    record = make_record(cls="chat", profile="plain")
    line = format_record(record)
    assert "pool" not in line and "rewrite" not in line
    rewritten = replace(record, decision={**record.decision, "pool": "nothink"},
                        rewrite={"label": "model=deepseek-chat,thinking=off"})
    assert format_record(rewritten).endswith("pool nothink  rewrite model=deepseek-chat,thinking=off")

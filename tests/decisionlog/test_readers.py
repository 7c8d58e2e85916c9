"""Reading the decision log: one reader across rotation, and following a live log."""

from __future__ import annotations

from pathlib import Path

import pytest

from decisionlog.readers import LogFollower, follow, read_records
from decisionlog.records import to_json
from decisionlog.writer import DecisionLog, LogFileError
from tests.decisionlog.examples import make_record

LINE_BYTES = len(to_json(make_record(request_id="r000"))) + 1


def test_read_records_goes_through_rotated_sets_oldest_first_and_says_what_it_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    with DecisionLog(first, rotate_mb=1.5 * LINE_BYTES / (1024 * 1024)) as log:
        for i in range(3):  # a.jsonl.2, a.jsonl.1, a.jsonl
            log.write_record(make_record(request_id=f"a{i}"))
    with DecisionLog(second) as log:
        log.write_record(make_record(request_id="b0"))
        log.write('{"schema_version": 9}')
        log.write("not json")
    ids = [r.request_id for r in read_records([first, second, first.with_name("a.jsonl.1")])]
    assert ids == ["a0", "a1", "a2", "b0"]  # a.jsonl.1 was read once, with its set
    assert "4 records, 1 malformed lines skipped, 1 lines of unknown schema_version 9" in (
        capsys.readouterr().err)


def test_read_records_names_a_missing_log(tmp_path: Path) -> None:
    with pytest.raises(LogFileError, match="no decision log"):
        list(read_records([tmp_path / "missing.jsonl"]))


def test_follower_sees_appends_partial_lines_rotation_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path, rotate_mb=2.5 * LINE_BYTES / (1024 * 1024), keep=3)
    log.write("old-1")
    follower = LogFollower(path)  # starts at the end, like tail -f
    assert follower.poll() == []
    log.write("new-1")
    assert follower.poll() == ["new-1"]
    with open(path, "a", encoding="utf-8") as file:
        file.write("half")
    assert follower.poll() == []  # waits for the newline
    with open(path, "a", encoding="utf-8") as file:
        file.write("-done\n")
    assert follower.poll() == ["half-done"]
    pad = "x" * (LINE_BYTES - 10)
    for i in range(6):  # two rotations between polls
        log.write(f"{pad}{i}")
    seen = follower.poll()
    assert [line[-1] for line in seen] == [str(i) for i in range(6)]  # the middle file too
    assert follower.rotations_seen == 1
    log.close()
    path.write_text("")  # truncated in place
    assert follower.poll() == []
    with open(path, "a", encoding="utf-8") as file:
        file.write("after-truncate\n")
    assert follower.poll() == ["after-truncate"]
    follower.close()


def test_follower_reads_each_line_across_a_rotation_once(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    log = DecisionLog(path, rotate_mb=2.5 * LINE_BYTES / (1024 * 1024), keep=5)
    follower = LogFollower(path, from_start=True)
    seen: list[str] = []
    pad = "y" * (LINE_BYTES - 10)
    for i in range(9):
        log.write(f"{pad}{i}")
        if i % 2:
            seen += follower.poll()
    seen += follower.poll()
    log.close()
    assert [line[-1] for line in seen] == [str(i) for i in range(9)]


def test_follow_yields_batches_until_stopped(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    polls = 0

    def stop() -> bool:
        return polls >= 3

    batches = []
    with DecisionLog(path) as log:
        for batch in follow(path, poll_s=0, stop=stop, from_start=True, sleep=lambda _: None):
            batches.append(batch)
            polls += 1
            log.write(f"line-{polls}")
    assert batches == [[], ["line-1"], ["line-2"]]

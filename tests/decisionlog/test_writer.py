"""The decision log on disk: rotation without loss, crash safety, skipped-line counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from decisionlog.readers import iter_log_records
from decisionlog.records import ReadStats, to_json
from decisionlog.writer import DecisionLog, LogFileError, expand_paths, rotated_set
from tests.decisionlog.examples import make_record

LINE_BYTES = len(to_json(make_record(request_id="r000"))) + 1


def _ids(path: Path, stats: ReadStats | None = None) -> list[str]:
    return [r.request_id for r in iter_log_records([path], stats)]


def test_records_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "decisions.jsonl"
    with DecisionLog(path) as log:
        for i in range(3):
            log.write_record(make_record(request_id=f"r{i:03}"))
    stats = ReadStats()
    assert _ids(path, stats) == ["r000", "r001", "r002"]
    assert stats.read == 3 and stats.skipped_malformed == 0


def test_rotation_keeps_every_line_in_order(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    rotate_mb = 3.5 * LINE_BYTES / (1024 * 1024)  # three lines per file
    with DecisionLog(path, rotate_mb=rotate_mb, keep=50) as log:
        for i in range(20):
            log.write_record(make_record(request_id=f"r{i:03}"))
        assert log.rotations == 6
    files = rotated_set(path)
    assert [f.name for f in files][:2] == ["decisions.jsonl.6", "decisions.jsonl.5"]
    assert files[-1] == path
    assert all(f.stat().st_size <= 3.5 * LINE_BYTES for f in files)
    assert _ids(path) == [f"r{i:03}" for i in range(20)]


def test_rotation_drops_files_beyond_keep(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    with DecisionLog(path, rotate_mb=2.5 * LINE_BYTES / (1024 * 1024), keep=2) as log:
        for i in range(10):
            log.write_record(make_record(request_id=f"r{i:03}"))
    assert [f.name for f in rotated_set(path)] == [
        "decisions.jsonl.2", "decisions.jsonl.1", "decisions.jsonl"]
    assert _ids(path) == [f"r{i:03}" for i in range(4, 10)]  # the newest, contiguous


def test_partial_last_line_is_skipped_counted_and_terminated_on_reopen(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    with DecisionLog(path) as log:
        log.write_record(make_record(request_id="before"))
    whole = to_json(make_record(request_id="torn"))
    with open(path, "a", encoding="utf-8") as file:
        file.write(whole[: len(whole) // 2])  # the process died mid-write
    stats = ReadStats()
    assert _ids(path, stats) == ["before"]
    assert stats.skipped_malformed == 1
    with DecisionLog(path) as log:
        log.write_record(make_record(request_id="after"))
    stats = ReadStats()
    assert _ids(path, stats) == ["before", "after"]
    assert stats.skipped_malformed == 1


def test_unknown_versions_and_foreign_lines_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    future = json.loads(to_json(make_record(request_id="future")))
    future["schema_version"] = 99
    lines = [to_json(make_record(request_id="ok")), json.dumps(future), json.dumps(future),
             "INFO server started", "{\"schema_version\": 1}", "\xff\xfe binary"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    stats = ReadStats()
    assert _ids(path, stats) == ["ok"]
    assert stats.skipped_versions == {99: 2}
    assert stats.skipped_malformed == 3
    assert "2 lines of unknown schema_version 99 skipped" in stats.summary()


@pytest.mark.parametrize(("rotate_mb", "keep"), [(0, 5), (-1, 5), (1, -1)])
def test_bad_rotation_settings_are_refused(tmp_path: Path, rotate_mb: float, keep: int) -> None:
    with pytest.raises(LogFileError):
        DecisionLog(tmp_path / "d.jsonl", rotate_mb=rotate_mb, keep=keep)


def test_a_line_with_a_newline_is_refused(tmp_path: Path) -> None:
    with DecisionLog(tmp_path / "d.jsonl") as log, pytest.raises(ValueError):
        log.write("two\nlines")


def test_expand_paths_reads_each_file_once_and_names_missing_logs(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    with DecisionLog(path, rotate_mb=1.5 * LINE_BYTES / (1024 * 1024)) as log:
        for i in range(3):
            log.write_record(make_record(request_id=f"r{i:03}"))
    rotated = tmp_path / "decisions.jsonl.1"
    assert expand_paths([path, rotated]) == rotated_set(path)
    assert expand_paths([rotated]) == [rotated]
    with pytest.raises(LogFileError, match="no decision log"):
        expand_paths([tmp_path / "missing.jsonl"])


def test_a_lone_surrogate_is_written_escaped_and_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    with DecisionLog(path) as log:
        log.write_record(make_record(request_id="r\ud800"))
    raw = path.read_bytes()
    assert b"\\ud800" in raw  # valid UTF-8 on disk, the JSON escape in the line
    assert _ids(path) == ["r\ud800"]


def test_a_full_disk_raises_and_leaves_nothing_buffered(tmp_path: Path) -> None:
    with DecisionLog("/dev/full") as log, pytest.raises(LogFileError, match="No space"):
        log.write_record(make_record(request_id="r000"))


def test_writes_resume_after_the_directory_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "d.jsonl"
    log = DecisionLog(path, rotate_mb=LINE_BYTES / (1024 * 1024))  # every line rotates
    log.write_record(make_record(request_id="r000"))
    (tmp_path / "logs" / "d.jsonl").unlink()
    (tmp_path / "logs").rmdir()
    (tmp_path / "logs").write_text("not a directory")
    with pytest.raises(LogFileError):
        log.write_record(make_record(request_id="r001"))
    (tmp_path / "logs").unlink()
    log.write_record(make_record(request_id="r002"))
    log.close()
    assert _ids(path) == ["r002"]
    with pytest.raises(LogFileError, match="closed"):
        log.write_record(make_record(request_id="r003"))


def test_every_string_in_a_line_is_capped() -> None:
    from decisionlog.records import STRING_CAP

    line = to_json(make_record(request_id="r" * 100_000))
    assert len(line) < 2 * STRING_CAP
    assert json.loads(line)["request_id"].startswith("r" * STRING_CAP)


def test_a_batch_is_written_whole_and_in_order_across_rotations(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    with DecisionLog(path, rotate_mb=2.5 * LINE_BYTES / (1024 * 1024), keep=10) as log:
        log.write_records([make_record(request_id=f"r{i:03}") for i in range(7)])
        log.write_records([])
        log.write_records([make_record(request_id="r007")])
        assert log.rotations == 3  # 2 lines per file: rotated before lines 3, 5 and 7
    ids = [r.request_id for r in iter_log_records(rotated_set(path))]
    assert ids == [f"r{i:03}" for i in range(8)]
    assert all(len(p.read_bytes()) <= 2.5 * LINE_BYTES for p in rotated_set(path))


def test_a_batch_that_cannot_be_written_says_how_many_lines_were_lost(tmp_path: Path) -> None:
    with DecisionLog("/dev/full") as log, pytest.raises(LogFileError, match="No space") as caught:
        log.write_records([make_record(request_id=f"r{i:03}") for i in range(5)])
    assert caught.value.lost == 5

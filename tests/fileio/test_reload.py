"""The one file reloader, on real files: a change is loaded once, a bad save is reported once
and hands out nothing, a deletion means what the caller says."""

from __future__ import annotations

import os
from pathlib import Path

from fileio.reload import Reloader, signature


def _save(path: Path, text: str) -> None:
    temp = path.with_suffix(".tmp")  # a new inode, like an editor's atomic save
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)


def _number(path: Path) -> int:
    return int(path.read_text(encoding="utf-8"))


def test_a_change_is_loaded_once_and_a_bad_save_reported_once(tmp_path: Path) -> None:
    path = tmp_path / "n.txt"
    path.write_text("1", encoding="utf-8")
    errors: list[Exception] = []
    reloader = Reloader(path, _number, errors=(ValueError,), on_error=errors.append)
    assert reloader.reload() is None  # as it was when the caller loaded it
    _save(path, "2")
    assert reloader.reload() == 2
    assert reloader.reload() is None
    _save(path, "two")
    assert reloader.reload() is None and reloader.reload() is None
    assert len(errors) == 1 and reloader.failed == 1
    _save(path, "3")
    assert reloader.reload() == 3


def test_a_same_size_save_within_one_mtime_is_still_seen(tmp_path: Path) -> None:
    path = tmp_path / "n.txt"
    path.write_text("1", encoding="utf-8")
    reloader = Reloader(path, _number, errors=(ValueError,), on_error=lambda exc: None)
    stat = path.stat()
    _save(path, "2")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    assert reloader.reload() == 2  # the inode changed


def test_a_deletion_keeps_the_value_unless_the_caller_gives_one(tmp_path: Path) -> None:
    kept, emptied = tmp_path / "kept.txt", tmp_path / "emptied.txt"
    for path in (kept, emptied):
        path.write_text("5", encoding="utf-8")
    keep = Reloader(kept, _number, errors=(ValueError,), on_error=lambda exc: None)
    empty = Reloader(emptied, _number, errors=(ValueError,), on_error=lambda exc: None,
                     if_deleted=lambda: 0)
    kept.unlink()
    emptied.unlink()
    assert keep.reload() is None
    assert empty.reload() == 0 and empty.reload() is None
    assert signature(kept) is None


def test_a_file_the_caller_wrote_itself_is_not_loaded_again(tmp_path: Path) -> None:
    path = tmp_path / "n.txt"
    path.write_text("1", encoding="utf-8")
    reloader = Reloader(path, _number, errors=(ValueError,), on_error=lambda exc: None)
    _save(path, "2")
    reloader.mark_seen()  # the caller wrote 2 and holds it
    assert reloader.reload() is None
    _save(path, "3")
    assert reloader.reload() == 3

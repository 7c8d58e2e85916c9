"""The decision log on disk: the writer the proxy appends to, and where its rotated files are
(`decisionlog.readers` reads them).

Writer: append-only JSON Lines. Each record is one `write()` system call of the whole line,
newline included, on an unbuffered file (`write_records`: the lines of a batch in one call, or
one per file when the batch crosses a rotation), so once `write_record(s)` returns the lines are
in the OS. The proxy hands over, every 20 ms, the records of the requests that finished since
(after their answers went out): a crash of the proxy loses at most those. A write that fails (disk full, file made unwritable) raises, says how many lines it
lost (`LogFileError.lost`) and leaves nothing buffered to resurface later; a line cut short by
it is ended before the next record. What UTF-8 cannot encode (a lone surrogate the client sent
inside a JSON string) is written as its JSON escape (`\ud800`), so the line stays valid JSON.
Writes are synchronous on purpose: a batch is a few KB going to the page cache (microseconds),
cheaper than a hop to a thread, and writing from the loop keeps lines in request-completion
order with no lock (one asyncio process, one thread writing). There is no fsync (it would put a
disk flush on every batch): a power loss may lose the last lines the OS had not written back.

Rotation is size-based: when the next line would take the file past `rotate_mb`, `log` becomes
`log.1`, `log.1` becomes `log.2`, ..., and `log.<keep>` is dropped. A fresh `log` is then opened.

A rotated set is read oldest first: `log.N`, ..., `log.1`, `log` (`rotated_set`, `expand_paths`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import IO, Final, Self

from decisionlog.records import RouteRecord, to_json_line

_ROTATED_SUFFIX: Final = re.compile(r"\.(\d+)$")


class LogFileError(OSError):
    """The decision log cannot be opened, written or rotated as configured; `lost` lines were
    not written."""

    lost: int = 1


class DecisionLog:
    """Append-only, size-rotated decision log. Not thread-safe: one writer thread per file."""

    sink_name = "decision_log"

    def __init__(self, path: str | os.PathLike[str], rotate_mb: float = 100.0, keep: int = 5):
        if rotate_mb <= 0:
            raise LogFileError(f"log.rotate_mb must be > 0, got {rotate_mb}")
        if keep < 0:
            raise LogFileError(f"log.keep must be >= 0, got {keep}")
        self.path = Path(path)
        self.max_bytes = int(rotate_mb * 1024 * 1024)
        self.keep = keep
        self.rotations = 0
        self._file: IO[bytes] | None = None
        self._size = 0
        self._cut_short = False  # the last write failed midway: end that line first
        self._closed = False  # by its owner (close()), for good
        self._open()

    def write_record(self, record: RouteRecord) -> None:
        self._append(to_json_line(record))

    def write_records(self, records: Sequence[RouteRecord]) -> None:
        """Append the records in order, as few `write()` calls as rotation allows (one, mostly):
        the proxy hands over what finished in one turn of its event loop. On a failure the lines
        not written are counted in `LogFileError.lost`; none stay buffered."""
        pending: list[bytes] = []
        size = 0
        done = 0
        for index, record in enumerate(records):
            line = to_json_line(record)
            if pending and self._size + size + len(line) > self.max_bytes:
                self._append_counting(b"".join(pending), len(records) - done)
                done = index
                pending, size = [], 0
            pending.append(line)
            size += len(line)
        if pending:
            self._append_counting(b"".join(pending), len(records) - done)

    def _append_counting(self, data: bytes, remaining: int) -> None:
        try:
            self._append(data)
        except LogFileError as exc:
            exc.lost = remaining
            raise

    def write(self, line: str) -> None:
        """Append one line (no newline inside it); rotate first if it would overflow the file."""
        if "\n" in line:
            raise ValueError("a decision-log line must not contain a newline")
        self._append((line + "\n").encode("utf-8", "backslashreplace"))

    def _append(self, data: bytes) -> None:
        """Whole lines, newline-terminated, in one system call."""
        if self._cut_short:
            data = b"\n" + data
        if self._closed:
            raise LogFileError(f"decision log {self.path} is closed")
        if self._file is None:  # a failed rotation or open left none: try again, line by line
            self._open()
        if self._size and self._size + len(data) > self.max_bytes:
            self.rotate()
        file = self._require_open()
        try:
            written = file.write(data)  # one system call: the whole line reaches the OS here
        except OSError as exc:
            self._cut_short = True  # some bytes may have gone out before the error
            raise LogFileError(f"cannot write decision log {self.path}: {exc}") from exc
        self._cut_short = written != len(data)
        self._size += written or 0
        if self._cut_short:
            raise LogFileError(f"decision log {self.path}: short write ({written} of {len(data)})")

    def rotate(self) -> None:
        """Shift `log.i` to `log.i+1` (dropping the oldest), `log` to `log.1`, open a new `log`."""
        self._close_file()
        try:
            if self.keep == 0:
                self.path.unlink(missing_ok=True)
            else:
                self._rotated(self.keep).unlink(missing_ok=True)
                for index in range(self.keep - 1, 0, -1):
                    if self._rotated(index).exists():
                        os.replace(self._rotated(index), self._rotated(index + 1))
                if self.path.exists():
                    os.replace(self.path, self._rotated(1))
        except OSError as exc:
            raise LogFileError(f"cannot rotate decision log {self.path}: {exc}") from exc
        self.rotations += 1
        self._open()

    def close(self) -> None:
        self._closed = True
        self._close_file()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _rotated(self, index: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{index}")

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            needs_newline = _ends_without_newline(self.path)
            self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115
            if needs_newline:
                # a crash left a partial line: end it so the next record starts on its own line
                self._file.write(b"\n")
            self._cut_short = False
            self._size = self._file.tell()
        except OSError as exc:
            raise LogFileError(f"cannot open decision log {self.path}: {exc}") from exc

    def _require_open(self) -> IO[bytes]:
        if self._file is None:
            raise LogFileError(f"decision log {self.path} is closed")
        return self._file


def _ends_without_newline(path: Path) -> bool:
    try:
        with open(path, "rb") as file:
            file.seek(0, os.SEEK_END)
            if file.tell() == 0:
                return False
            file.seek(-1, os.SEEK_END)
            return file.read(1) != b"\n"
    except FileNotFoundError:
        return False


def rotated_set(path: str | os.PathLike[str]) -> list[Path]:
    """The existing files of one log, oldest first: `log.N`, ..., `log.1`, `log`.

    A path that is itself a rotated file (`log.3`) stands for that file alone.
    """
    base = Path(path)
    if _ROTATED_SUFFIX.search(base.name):
        return [base] if base.exists() else []
    pattern = re.compile(re.escape(base.name) + r"\.(\d+)$")
    rotated: list[tuple[int, Path]] = []
    if base.parent.is_dir():
        for sibling in base.parent.iterdir():
            match = pattern.fullmatch(sibling.name)
            if match:
                rotated.append((int(match.group(1)), sibling))
    ordered = [p for _, p in sorted(rotated, key=lambda item: item[0], reverse=True)]
    return ordered + ([base] if base.exists() else [])


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every file to read for these log paths, each rotated set oldest first, no file twice."""
    seen: set[Path] = set()
    files: list[Path] = []
    for path in paths:
        found = rotated_set(path)
        if not found:
            raise LogFileError(f"no decision log at {path}")
        for file in found:
            key = file.resolve()
            if key not in seen:
                seen.add(key)
                files.append(file)
    return files

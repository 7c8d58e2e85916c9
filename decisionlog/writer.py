"""The decision log on disk: the writer the proxy appends to, and the readers `tail`, `report`,
`learn` and `train` use.

Writer: append-only JSON Lines. Each record is one `write()` of the whole line, newline included,
on a line-buffered file, so once `write_record` returns the line is in the OS and a crash of the
proxy loses at most the line being written. Writes are synchronous on purpose: a line is a few KB
going to the page cache (microseconds), cheaper than a hop to a thread, and doing it inline keeps
lines in request-completion order with no lock (one asyncio process, one thread writing). There is
no fsync per line (it would put a disk flush on every request): a power loss may lose the last
lines the OS had not written back, a process crash does not.

Rotation is size-based: when the next line would take the file past `rotate_mb`, `log` becomes
`log.1`, `log.1` becomes `log.2`, ..., and `log.<keep>` is dropped. A fresh `log` is then opened.

Readers take rotated sets oldest first (`log.N`, ..., `log.1`, `log`) and skip, with a count in
`ReadStats`, anything that is not a record they know (a partial last line, foreign text, an
unknown `schema_version`). `LogFollower` follows a live log across rotation and truncation.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Final, Self

from decisionlog.records import ReadStats, RouteRecord, parse_line, to_json

_ROTATED_SUFFIX: Final = re.compile(r"\.(\d+)$")


class LogFileError(Exception):
    """The decision log cannot be opened, written or rotated as configured."""


class DecisionLog:
    """Append-only, size-rotated decision log. Not thread-safe: one writer thread per file."""

    def __init__(self, path: str | os.PathLike[str], rotate_mb: float = 100.0, keep: int = 5):
        if rotate_mb <= 0:
            raise LogFileError(f"log.rotate_mb must be > 0, got {rotate_mb}")
        if keep < 0:
            raise LogFileError(f"log.keep must be >= 0, got {keep}")
        self.path = Path(path)
        self.max_bytes = int(rotate_mb * 1024 * 1024)
        self.keep = keep
        self.rotations = 0
        self._file: IO[str] | None = None
        self._size = 0
        self._open()

    def write_record(self, record: RouteRecord) -> None:
        self.write(to_json(record))

    def write(self, line: str) -> None:
        """Append one line (no newline inside it); rotate first if it would overflow the file."""
        if "\n" in line:
            raise ValueError("a decision-log line must not contain a newline")
        data = line + "\n"
        size = len(data.encode("utf-8"))
        if self._size and self._size + size > self.max_bytes:
            self.rotate()
        file = self._require_open()
        file.write(data)  # one call, line-buffered: the whole line reaches the OS here
        self._size += size

    def rotate(self) -> None:
        """Shift `log.i` to `log.i+1` (dropping the oldest), `log` to `log.1`, open a new `log`."""
        self.close()
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
            self._file = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
            if needs_newline:
                # a crash left a partial line: end it so the next record starts on its own line
                self._file.write("\n")
            self._size = self._file.tell()
        except OSError as exc:
            raise LogFileError(f"cannot open decision log {self.path}: {exc}") from exc

    def _require_open(self) -> IO[str]:
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


def iter_lines(paths: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    """Raw lines of the logs, oldest first; undecodable bytes are replaced, never fatal."""
    for file in expand_paths(paths):
        with open(file, encoding="utf-8", errors="replace", newline="\n") as handle:
            for line in handle:
                if line.strip():
                    yield line.rstrip("\n")


def iter_log_records(
    paths: Iterable[str | os.PathLike[str]], stats: ReadStats | None = None
) -> Iterator[RouteRecord]:
    """Records of the logs (rotated sets oldest first); what is not a known record is counted."""
    stats = stats if stats is not None else ReadStats()
    for line in iter_lines(paths):
        record = parse_line(line, stats)
        if record is not None:
            yield record


class LogFollower:
    """Reads lines appended to a live log, poll by poll, across rotation and truncation.

    Rotation is noticed when `path` names another file (inode changed) or disappears: the old file
    is read to its end first (the writer closes it before renaming), then any files rotated out
    after it (several rotations between two polls), then the new one from its start. A file that
    shrank was truncated: it is read again from the start.
    """

    def __init__(self, path: str | os.PathLike[str], *, from_start: bool = False):
        self.path = Path(path)
        self.rotations_seen = 0
        self._file: IO[bytes] | None = None
        self._inode: tuple[int, int] | None = None
        self._pending = b""
        self._seek_end_on_open = not from_start

    def poll(self) -> list[str]:
        """Complete lines written since the last poll (a partial line waits for its newline)."""
        if self._file is None and not self._open():
            self._seek_end_on_open = False  # a log that appears later is read from its start
            return []
        current = _identity(self.path)
        lines = self._read_available()
        if current != self._inode:
            lines += self._flush_pending()
            lines += self._rotated_since(self._inode)
            self._close()
            if current is not None:
                self.rotations_seen += 1
                self._open()
                lines += self._read_available()
        elif self._file is not None and os.fstat(self._file.fileno()).st_size < self._file.tell():
            self._pending = b""
            self._file.seek(0)
            lines += self._read_available()
        return lines

    def close(self) -> None:
        self._close()

    def _rotated_since(self, inode: tuple[int, int] | None) -> list[str]:
        """Whole files rotated out after ours (several rotations between two polls)."""
        rotated = rotated_set(self.path)[:-1] if self.path.exists() else rotated_set(self.path)
        identities = [_identity(f) for f in rotated]
        if inode is None or inode not in identities:
            return []
        lines: list[str] = []
        for file in rotated[identities.index(inode) + 1:]:
            with open(file, "rb") as handle:
                lines += [raw.decode("utf-8", errors="replace")
                          for raw in handle.read().split(b"\n") if raw.strip()]
        return lines

    def _open(self) -> bool:
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115
        except FileNotFoundError:
            return False
        stat = os.fstat(self._file.fileno())
        self._inode = (stat.st_dev, stat.st_ino)
        if self._seek_end_on_open:
            self._file.seek(0, os.SEEK_END)
            self._seek_end_on_open = False
        return True

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = None
        self._inode = None

    def _read_available(self) -> list[str]:
        if self._file is None:
            return []
        data = self._pending + self._file.read()
        *complete, self._pending = data.split(b"\n")
        return [raw.decode("utf-8", errors="replace") for raw in complete if raw.strip()]

    def _flush_pending(self) -> list[str]:
        # a line left without its newline in a rotated-away file will never be finished
        rest, self._pending = self._pending, b""
        return [rest.decode("utf-8", errors="replace")] if rest.strip() else []


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return (stat.st_dev, stat.st_ino)


def follow(
    path: str | os.PathLike[str],
    *,
    poll_s: float = 0.5,
    stop: Callable[[], bool],
    from_start: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[list[str]]:
    """One batch of new lines per poll (possibly empty) until `stop()` is true."""
    follower = LogFollower(path, from_start=from_start)
    try:
        while not stop():
            yield follower.poll()
            sleep(poll_s)
    finally:
        follower.close()

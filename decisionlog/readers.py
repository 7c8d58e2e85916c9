"""Reading the decision log: the one reader of records across rotation, for every package.

The proxy's learner, `specroute learn`, `tail` and `report` all read through here. Rotated
sets are read oldest first (`log.N`, ..., `log.1`, `log`); anything that is not a record of a
known `schema_version` (a partial last line, foreign text, a newer version) is skipped and
counted in `ReadStats`. `LogFollower` follows a live log across rotation and truncation.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

from decisionlog.records import ReadStats, RouteRecord, parse_line
from decisionlog.writer import expand_paths, rotated_set


def read_records(paths: Iterable[str | os.PathLike[str]]) -> Iterator[RouteRecord]:
    """Every record of the logs, each rotated set oldest first; at the end, what was read and
    skipped is said on stderr (the commands' way: `specroute learn`, `specroute train`)."""
    stats = ReadStats()
    names = [str(p) for p in paths]
    yield from iter_log_records(names, stats)
    print(f"read {', '.join(names)}: {stats.summary()}", file=sys.stderr)


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

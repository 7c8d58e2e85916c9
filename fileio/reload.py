"""Hot reload of a value kept in a file: how the policy store, the classifier's holder and the
arms' holder notice that a file changed and take in what it now holds.

A file is looked at by its signature (inode, size, mtime_ns: `os.replace` changes the inode, so
an editor's or `write_learned`'s atomic save is seen even within one mtime tick). A changed file
is loaded whole; the new value is handed out only when it loads. A file that fails to load is
remembered by its signature, so that one bad save is reported once, and the last good value stays
with the caller. What a deleted file means is the caller's: nothing (keep the value in force) or
a value of its own (nothing learned yet).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")
Signature = tuple[int, int, int]  # (inode, size, mtime_ns)


def write_atomically(path: str | Path, text: str) -> None:
    """Write `text` so that a reader (a Reloader) sees the old file or the new, never half:
    a temporary sibling, flushed to disk, then renamed over the target."""
    target = Path(path)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def signature(path: Path) -> Signature | None:
    """The file's signature, or None when there is no file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class Reloader(Generic[T]):
    """Loads `path` again each time it changes; `reload()` gives the new value, or None."""

    def __init__(
        self,
        path: Path,
        load: Callable[[Path], T],
        *,
        errors: tuple[type[Exception], ...],
        on_error: Callable[[Exception], None],
        if_deleted: Callable[[], T] | None = None,
    ) -> None:
        """`errors` are what a bad file raises (reported to `on_error`, counted in `failed`);
        `if_deleted` gives the value of a deleted file (None: a deletion changes nothing). The
        file as it is now counts as seen: the caller loads it first."""
        self.path = path
        self.failed = 0
        self._load = load
        self._errors = errors
        self._on_error = on_error
        self._if_deleted = if_deleted
        self._seen = signature(path)

    def mark_seen(self) -> None:
        """The file as it is now counts as seen (the caller wrote it and holds its value)."""
        self._seen = signature(self.path)

    def reload(self) -> T | None:
        """The file's new value if it changed since the last look and loads, else None."""
        now = signature(self.path)
        if now == self._seen or (now is None and self._if_deleted is None):
            return None
        self._seen = now
        if now is None:
            assert self._if_deleted is not None
            return self._if_deleted()
        try:
            return self._load(self.path)
        except self._errors as exc:
            self.failed += 1
            self._on_error(exc)
            return None

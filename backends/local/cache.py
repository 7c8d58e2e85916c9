"""The specroute cache: where the local llama-server and model files live, and how they get there.

`${XDG_CACHE_HOME:-~/.cache}/specroute`. Everything in it is produced atomically (built or
assembled in a temporary sibling, then renamed) under an exclusive lock file, so that two
callers never build the same thing twice and a crash never leaves a half-written artifact.
Packages come from PyPI with the ordinary client (`pip download --no-deps`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

Progress = Callable[[str], None]


class LocalBackendError(RuntimeError):
    """Building or assembling the local backend failed; the message says what and where."""


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME", str(Path.home()))) / ".cache")
    return Path(base) / "specroute"


@contextlib.contextmanager
def exclusive(root: Path, name: str, progress: Progress) -> Iterator[None]:
    """Hold `root/locks/<name>.lock`; tell the user when another process holds it."""
    locks = root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting: another process is preparing {name} ({locks / name}.lock)")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def stop_process(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    """Stop a server we started, by its PID: `sig`, then SIGKILL after 5 s."""
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


def free_loopback_port() -> int:
    """A port nothing listens on now (the OS picks it; the server binds it moments later)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def pip_download(
    requirements: Sequence[str], dest: Path, progress: Progress, *, source: bool = False
) -> list[Path]:
    """`pip download --no-deps` into `dest` (pip reuses files already there); the files.

    `source`: the sdists of `requirements`. Only those are forced to source: `:all:` would also
    build the sdist's build backend (scikit-build-core, hatchling ...) from source, recursively.
    """
    dest.mkdir(parents=True, exist_ok=True)
    names = ",".join(requirement.split("=")[0].strip() for requirement in requirements)
    kind = ["--no-binary", names] if source else ["--only-binary", ":all:"]
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
            "--progress-bar", "off", *kind, "-d", str(dest), *requirements]
    progress(f"pip download {' '.join(requirements[:3])}{' ...' if len(requirements) > 3 else ''}")
    run_streaming(argv, progress, prefix="  pip: ", keep=lambda line: "Saved" in line
                  or "Downloading" in line or "already downloaded" in line)
    return sorted(dest.iterdir())


def run_streaming(
    argv: Sequence[str],
    progress: Progress,
    *,
    prefix: str = "",
    keep: Callable[[str], bool] = lambda line: True,
    log: Path | None = None,
    cwd: Path | None = None,
) -> None:
    """Run `argv`, showing the lines `keep` selects; all output goes to `log` if given."""
    started = time.monotonic()
    tail: list[str] = []
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(log, "a")) if log is not None else None
        process = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", cwd=cwd, stdin=subprocess.DEVNULL,
        )
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.rstrip()
            tail = (tail + [line])[-30:]
            if sink is not None:
                sink.write(raw)
            if line and keep(line):
                progress(prefix + line[:160])
        code = process.wait()
    if code != 0:
        where = f" (full log: {log})" if log is not None else ""
        raise LocalBackendError(
            f"command failed with exit code {code} after {time.monotonic() - started:.0f}s"
            f"{where}: {' '.join(argv[:4])} ...\n" + "\n".join(tail)
        )


def cache_parser(prog: str, description: str, ensure_help: str) -> argparse.ArgumentParser:
    """The command line every cached part shares: `ensure` (install what is missing) or
    `where` (only report), and the cache directory."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("verb", choices=("ensure", "where"),
                        help=f"ensure: {ensure_help}; where: only report")
    parser.add_argument("--cache-dir", default=str(cache_root()),
                        help="cache directory (${XDG_CACHE_HOME:-~/.cache}/specroute)")
    return parser

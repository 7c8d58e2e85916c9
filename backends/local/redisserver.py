"""A real `redis-server` on loopback for the replicas' tests, benchmark and demo: a free port,
no persistence, stopped by PID (never by name). Debian's package (`apt-get install
redis-server`); `.ci/run` installs it where it is missing.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from backends.local.cache import LocalBackendError, free_loopback_port, stop_process

START_TIMEOUT_S = 10.0


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop it by its PID (SIGKILL for a store that dies mid-run)."""
        stop_process(self.process, sig)


def redis_binary() -> str | None:
    return shutil.which("redis-server") or next(
        (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()), None)


def start_redis(port: int = 0, workdir: Path | None = None) -> RedisServer:
    """A redis-server on 127.0.0.1 (`port` 0: a free one), answering PING when this returns."""
    binary = redis_binary()
    if binary is None:
        raise LocalBackendError("redis-server is not installed (Debian: apt-get install "
                                "redis-server; .ci/run installs it)")
    port = port or free_loopback_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
            "--loglevel", "warning"]
    if workdir is not None:
        argv += ["--dir", str(workdir)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = RedisServer(port, process)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise LocalBackendError(f"redis-server exited at start: {error.strip()}")
        if _pings(port):
            return server
        time.sleep(0.02)
    server.stop(signal.SIGKILL)
    raise LocalBackendError(f"redis-server did not answer on port {port} within "
                            f"{START_TIMEOUT_S:.0f} s")


@contextlib.contextmanager
def running_redis(port: int = 0) -> Iterator[RedisServer]:
    server = start_redis(port)
    try:
        yield server
    finally:
        server.stop()


def _pings(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False

"""Keep the backends running: launch, wait until ready, health-check, restart, stop. No orphans.

Each launched backend runs in its own session (process group) with stdout and stderr appended to
`<log_dir>/<name>.log`; on Linux it also gets SIGKILL when the process that spawned it dies
(PR_SET_PDEATHSIG), so a crashed router leaves nothing behind. A process that dies is restarted
with exponential backoff, and so is one that lives but fails `failures_to_restart` health probes
in a row (hung); stop sends SIGTERM to its group, then SIGKILL after a grace period.
Every backend, launched or attached, is probed periodically with its engine's probe; a change
of health calls `on_change(name, healthy, reason)` so that the router can log it and fail over.
A refused connection marks a backend unhealthy at once (nothing listens: it is down, not busy);
a slow or failing answer needs `failures_to_unhealthy` in a row. A backend that is unhealthy or
has just failed a probe is probed again every `retry_interval_s` (not every
`health_interval_s`), so that an outage and a recovery are both noticed within about a second.
`refresh(max_age_s)` probes now whatever was not probed that recently (`/readyz` calls it).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Final

import aiohttp

from backends.engines import ADAPTERS, EngineAdapter
from backends.spec import BackendSpec

OnChange = Callable[[str, bool, str], None]
# the reason `on_change` gives when `stop` takes a launched backend down: asked for, not a fault
STOPPED: Final = "stopped"
_PR_SET_PDEATHSIG = 1


class BackendStartError(RuntimeError):
    """A launched backend did not become ready; the message includes the end of its log."""


@dataclass(frozen=True, slots=True)
class BackendStatus:
    name: str
    profile: str
    launched: bool
    healthy: bool = False
    pid: int | None = None
    restarts: int = 0
    last_error: str = ""
    log_path: str = ""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 8192))
            text = handle.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


async def probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """"" when `url` answers 200, else why not."""
    why, _ = await probe_once(session, url, timeout_s)
    return why


async def probe_once(session: aiohttp.ClientSession, url: str, timeout_s: float) -> tuple[str, bool]:
    """("", False) when `url` answers 200, else (why not, whether the connection was refused)."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as response:
            await response.read()
            return ("", False) if response.status == 200 else (f"{url} answered {response.status}", False)
    except aiohttp.ClientConnectorError as error:  # refused or unreachable: down, not busy
        return f"{url}: {type(error).__name__} {error}".strip(), True
    except (TimeoutError, aiohttp.ClientError, OSError) as error:
        return f"{url}: {type(error).__name__} {error}".strip(), False


class _Managed:
    """One launched process and its restart bookkeeping."""

    def __init__(self, spec: BackendSpec, adapter: EngineAdapter, log_path: Path) -> None:
        self.spec = spec
        self.adapter = adapter
        self.log_path = log_path
        self.process: asyncio.subprocess.Process | None = None
        self.killed_because = ""  # set when the supervisor kills a hung process
        self.ready = False  # answered its readiness probe since it was last spawned

    async def spawn(self, *, tie_to_parent: bool) -> int:
        self.ready = False
        command = self.adapter.command(self.spec)
        launch = self.spec.launch
        # The child writes to its own copy of the descriptor; ours closes when spawned.
        with _open_log(self.log_path, " ".join(command.argv)) as log:
            try:
                self.process = await asyncio.create_subprocess_exec(
                    *command.argv,
                    stdin=asyncio.subprocess.DEVNULL, stdout=log,
                    stderr=asyncio.subprocess.STDOUT, env={**os.environ, **command.env},
                    cwd=(launch.cwd or None) if launch else None, start_new_session=True,
                    preexec_fn=_die_with_parent if tie_to_parent else None,
                )
            except OSError as error:
                raise BackendStartError(
                    f"backend {self.spec.name!r}: cannot run {command.argv[0]!r}: {error}"
                ) from error
        return self.process.pid

    async def terminate(self, grace_s: float) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`, reap the leader. Idempotent."""
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            _signal_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), grace_s)
            except TimeoutError:
                pass
        _signal_group(process.pid, signal.SIGKILL)  # also any child the leader left behind
        await process.wait()
        self.process = None


def _open_log(path: Path, argv: str) -> IO[bytes]:
    log = open(path, "ab")  # noqa: SIM115 (the caller closes it once the child has it)
    log.write(f"=== {time.strftime('%Y-%m-%dT%H:%M:%S')} specroute starts: {argv}\n".encode())
    log.flush()
    return log


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)  # the leader's pid is the group id (start_new_session)


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    """How the supervisor watches: probe period and timeout, when a backend counts as unhealthy
    or hung, restart backoff, and how long a backend may take to stop."""

    health_interval_s: float = 5.0
    retry_interval_s: float = 0.5  # unhealthy or just failed a probe: probed this often
    probe_timeout_s: float = 5.0
    failures_to_unhealthy: int = 2
    failures_to_restart: int = 6  # probes failed in a row by a live process: hung (0: never)
    backoff_initial_s: float = 1.0
    backoff_max_s: float = 60.0
    stop_grace_s: float = 10.0  # SIGTERM, then SIGKILL after this
    tie_to_parent: bool = True  # a launched backend dies with this process


class Supervisor:
    """Starts, watches and stops the backends of one config."""

    def __init__(
        self,
        specs: Sequence[BackendSpec],
        log_dir: str | Path,
        *,
        session: aiohttp.ClientSession,
        settings: SupervisorSettings = SupervisorSettings(),
        on_change: OnChange | None = None,
        adapters: Mapping[str, EngineAdapter] = ADAPTERS,
        backoff_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._specs = {spec.name: spec for spec in specs}
        self._adapters = adapters
        self._log_dir = Path(log_dir)
        self._session = session
        self._interval = settings.health_interval_s
        self._retry_interval = min(settings.retry_interval_s, settings.health_interval_s)
        self._last_probe: dict[str, float] = {}
        self._refreshing: asyncio.Future[list[None]] | None = None
        self._probe_timeout = settings.probe_timeout_s
        self._failures_to_unhealthy = settings.failures_to_unhealthy
        self._failures_to_restart = settings.failures_to_restart
        self._backoff = (settings.backoff_initial_s, settings.backoff_max_s)
        self._grace = settings.stop_grace_s
        self._tie = settings.tie_to_parent
        self._on_change = on_change
        self._backoff_sleep = backoff_sleep
        self._managed: dict[str, _Managed] = {}
        self._status: dict[str, BackendStatus] = {
            spec.name: BackendStatus(spec.name, spec.profile, spec.launch is not None)
            for spec in specs
        }
        self._failures: dict[str, int] = dict.fromkeys(self._specs, 0)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    # -- what the router reads ------------------------------------------------------------
    def state(self, name: str) -> BackendStatus:
        return self._status[name]

    def statuses(self) -> dict[str, BackendStatus]:
        return dict(self._status)

    # -- lifecycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Launch what has a launch block and wait until all are ready; probe the attached.

        Raises BackendStartError (after stopping what was started) if one never gets ready.
        """
        self._log_dir.mkdir(parents=True, exist_ok=True)
        launched = [spec for spec in self._specs.values() if spec.launch is not None]
        for spec in launched:
            adapter = self._adapters[spec.engine]
            managed = _Managed(spec, adapter, self._log_dir / f"{spec.name}.log")
            self._managed[spec.name] = managed
            self._update(spec.name, log_path=str(managed.log_path))
        try:
            await asyncio.gather(*(self._launch(name) for name in self._managed))
        except BaseException:
            await self.stop()
            raise
        await asyncio.gather(*(self._check(name) for name in self._specs
                               if name not in self._managed))
        self._tasks = [asyncio.create_task(self._watch(name)) for name in self._managed]
        self._tasks.append(asyncio.create_task(self._health_loop()))

    async def stop(self) -> None:
        """Stop health checks and watchers, then every launched process group. Idempotent."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await asyncio.gather(*(m.terminate(self._grace) for m in self._managed.values()))
        for name in self._managed:
            self._set_health(name, False, STOPPED)
            self._update(name, pid=None)

    # -- internals ------------------------------------------------------------------------
    async def _launch(self, name: str) -> None:
        managed = self._managed[name]
        pid = await managed.spawn(tie_to_parent=self._tie)
        self._update(name, pid=pid)
        await self._wait_ready(managed)
        managed.ready = True
        self._failures[name] = 0
        self._set_health(name, True, "ready")

    async def _wait_ready(self, managed: _Managed) -> None:
        spec, process = managed.spec, managed.process
        assert spec.launch is not None and process is not None
        url = spec.base_url + managed.adapter.ready_path
        deadline = time.monotonic() + spec.launch.ready_timeout_s
        why = "not probed yet"
        while time.monotonic() < deadline:
            if process.returncode is not None:
                raise BackendStartError(
                    f"backend {spec.name!r} exited with code {process.returncode} before it was "
                    f"ready; end of {managed.log_path}:\n{log_tail(managed.log_path)}"
                )
            why = await probe(self._session, url, self._probe_timeout)
            if not why:
                return
            await asyncio.sleep(0.2)
        await managed.terminate(self._grace)
        raise BackendStartError(
            f"backend {spec.name!r} not ready after {spec.launch.ready_timeout_s:.0f}s ({why}); "
            f"end of {managed.log_path}:\n{log_tail(managed.log_path)}"
        )

    async def _watch(self, name: str) -> None:
        """Restart the process whenever it dies, waiting longer after each quick failure."""
        managed = self._managed[name]
        delay = self._backoff[0]
        while not self._stopping:
            process = managed.process
            code = await process.wait() if process is not None else None
            if self._stopping:
                return
            await managed.terminate(self._grace)  # reap, and kill what the leader left behind
            why = managed.killed_because or (
                f"exited with code {code}" if process is not None else "did not become ready")
            managed.killed_because = ""
            self._set_health(name, False, why)
            self._update(name, pid=None, restarts=self._status[name].restarts + 1)
            await self._backoff_sleep(delay)
            delay = min(delay * 2, self._backoff[1])
            try:
                await self._launch(name)
                delay = self._backoff[0]  # ready again: the next failure starts over
            except BackendStartError as error:
                self._update(name, last_error=str(error).splitlines()[0])

    async def refresh(self, max_age_s: float) -> None:
        """Probe now every backend not probed in the last `max_age_s` (one round at a time:
        concurrent callers share it)."""
        if self._refreshing is None or self._refreshing.done():
            now = time.monotonic()
            stale = [n for n in self._specs if now - self._last_probe.get(n, 0.0) >= max_age_s]
            self._refreshing = asyncio.gather(*(self._check(name) for name in stale))
        await asyncio.shield(self._refreshing)

    async def _health_loop(self) -> None:
        for name in self._specs:  # start() has just probed them all
            self._last_probe.setdefault(name, time.monotonic())
        while not self._stopping:
            await asyncio.sleep(self._retry_interval)
            now = time.monotonic()
            due = [n for n in self._specs if now - self._last_probe.get(n, 0.0) >= self._period(n)]
            await asyncio.gather(*(self._check(name) for name in due))

    def _period(self, name: str) -> float:
        """Healthy and quiet: the configured interval; unhealthy or just failed: the retry one."""
        steady = self._status[name].healthy and self._failures[name] == 0
        return self._interval if steady else self._retry_interval

    async def _check(self, name: str) -> None:
        managed = self._managed.get(name)
        if managed is not None and (managed.process is None or not managed.ready
                                    or managed.process.returncode is not None):
            return  # dead, restarting or still loading: the watcher owns its health
        spec = self._specs[name]
        self._last_probe[name] = time.monotonic()
        probed = managed.process if managed is not None else None
        why, down = await probe_once(
            self._session, spec.base_url + self._adapters[spec.engine].ready_path,
            self._probe_timeout,
        )
        if self._stopping:
            return
        if managed is not None and (managed.process is not probed or not managed.ready):
            return  # it died or was restarted meanwhile: the answer is about another process
        if not why:
            self._failures[name] = 0
            self._set_health(name, True, "probe ok")
            return
        self._failures[name] += 1
        # One slow probe while the engine is busy is not an outage; a few in a row are.
        first = not self._status[name].healthy and self._status[name].last_error == ""
        if down or first or self._failures[name] >= self._failures_to_unhealthy:
            self._set_health(name, False, why)
        if managed is not None and 0 < self._failures_to_restart <= self._failures[name]:
            self._restart_hung(name, managed, why)

    def _restart_hung(self, name: str, managed: _Managed, why: str) -> None:
        """A launched process that lives but has stopped answering is killed; its watcher then
        restarts it as after a crash (a hung engine ignores a polite SIGTERM as often as not)."""
        process = managed.process
        if process is None:
            return
        self._failures[name] = 0
        managed.killed_because = f"hung: {self._failures_to_restart} probes failed ({why}); killed"
        self._set_health(name, False, managed.killed_because)
        _signal_group(process.pid, signal.SIGKILL)

    def _set_health(self, name: str, healthy: bool, reason: str) -> None:
        before = self._status[name]
        error = before.last_error if healthy else reason
        self._status[name] = replace(before, healthy=healthy, last_error=error)
        if before.healthy != healthy and self._on_change is not None:
            self._on_change(name, healthy, reason)

    def _update(self, name: str, **changes: object) -> None:
        self._status[name] = replace(self._status[name], **changes)  # type: ignore[arg-type]

"""`specroute backends up | status | down`: run the configured backends without the proxy.

`up` starts every backend that has a `launch` block and supervises it (restarts, health) in the
foreground until Ctrl-C; with `--detach` a background supervisor does the same and records its
PID and its backends' PIDs in a state file under the cache (`<cache>/run/`), which `status` and
`down` read. `down` asks that supervisor to stop (SIGTERM: it stops its backends cleanly) and
kills by PID whatever is still there after the timeout.

The router injects `load_backends(path) -> list[BackendSpec]` (it owns config.yaml).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import aiohttp

from backends.engines import ADAPTERS, EngineConfigError
from backends.local.cache import cache_root
from backends.spec import BackendSpec
from backends.supervisor import BackendStartError, BackendStatus, Supervisor, SupervisorSettings

LoadBackends = Callable[[str], Sequence[BackendSpec]]
Formatter = argparse.ArgumentDefaultsHelpFormatter


def register(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], *, load_config: LoadBackends
) -> None:
    group = subparsers.add_parser("backends", help="start, inspect and stop the backends",
                                  formatter_class=Formatter)
    verbs = group.add_subparsers(dest="verb", metavar="VERB", required=True)
    up = verbs.add_parser("up", help="start the launched backends and supervise them",
                          formatter_class=Formatter)
    up.add_argument("--log-dir", default="logs/backends", help="stdout/stderr of each backend")
    up.add_argument("--detach", action="store_true",
                    help="supervise in the background; record PIDs for status/down")
    up.add_argument("--health-interval", type=float, default=5.0,
                    help="seconds between health probes")
    status = verbs.add_parser("status", help="health of every configured backend",
                              formatter_class=Formatter)
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    down = verbs.add_parser("down", help="stop the backends started with `up --detach`",
                            formatter_class=Formatter)
    down.add_argument("--timeout", type=float, default=30.0,
                      help="seconds to wait for a clean stop before SIGKILL")
    for verb in (up, status, down):
        verb.add_argument("--config", default="config.yaml", help="config file")
    up.set_defaults(func=lambda args: _up(args, load_config))
    status.set_defaults(func=lambda args: _status(args, load_config))
    down.set_defaults(func=lambda args: _down(args, load_config))


def state_path(config_path: str, root: Path | None = None) -> Path:
    """One state file per config file, keyed by its absolute path."""
    key = hashlib.sha1(str(Path(config_path).resolve()).encode()).hexdigest()[:12]
    return (cache_root() if root is None else root) / "run" / f"backends-{key}.json"


def _load(args: argparse.Namespace, load_config: LoadBackends) -> list[BackendSpec] | None:
    try:
        return list(load_config(args.config))
    except (ValueError, OSError) as error:
        print(f"specroute: cannot use {args.config}: {error}", file=sys.stderr)
        return None


# -- up ---------------------------------------------------------------------------------------
def _up(args: argparse.Namespace, load_config: LoadBackends) -> int:
    specs = _load(args, load_config)
    if specs is None:
        return 2
    state = state_path(args.config)
    running = _read_state(state)
    if running and _alive(running.get("supervisor_pid", 0)):
        print(f"backends of {args.config} already run under supervisor pid "
              f"{running['supervisor_pid']}; run `specroute backends down` first", file=sys.stderr)
        return 1
    try:
        for spec in specs:
            if spec.launch is not None:
                ADAPTERS[spec.engine].command(spec)  # refuse bad launch blocks before forking
    except EngineConfigError as error:
        print(f"specroute: {error}", file=sys.stderr)
        return 2
    if not args.detach:
        return asyncio.run(_supervise(specs, args, state=None))
    return _detach(specs, args, state)


def _detach(specs: list[BackendSpec], args: argparse.Namespace, state: Path) -> int:
    log_dir = Path(args.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    state.unlink(missing_ok=True)
    pid = os.fork()
    if pid == 0:  # the background supervisor
        os.setsid()
        with open(os.devnull, "rb") as null, open(log_dir / "supervisor.log", "ab") as log:
            os.dup2(null.fileno(), 0)
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        code = 1
        try:
            code = asyncio.run(_supervise(specs, args, state=state))
        finally:
            os._exit(code)
    waited = max((s.launch.ready_timeout_s for s in specs if s.launch), default=0.0) + 30
    deadline = time.monotonic() + waited
    while time.monotonic() < deadline:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            print(f"the supervisor exited ({code}); see {log_dir / 'supervisor.log'}",
                  file=sys.stderr)
            return 1
        recorded = _read_state(state)
        if recorded.get("ready"):
            print(_table(recorded["backends"]))
            print(f"supervisor pid {pid}; state {state}; logs {log_dir}")
            return 0
        time.sleep(0.2)
    print(f"backends not ready after {waited:.0f}s; see {log_dir}", file=sys.stderr)
    return 1


async def _supervise(specs: list[BackendSpec], args: argparse.Namespace, state: Path | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with aiohttp.ClientSession() as session:
        supervisor: Supervisor | None = None
        started = False

        def changed(name: str, healthy: bool, reason: str) -> None:
            print(f"{time.strftime('%H:%M:%S')} {name}: {'healthy' if healthy else 'UNHEALTHY'} "
                  f"({reason})", file=sys.stderr, flush=True)
            if state is not None and supervisor is not None:  # new PIDs after a restart
                _write_state(state, args, supervisor.statuses(), specs, ready=started)

        supervisor = Supervisor(
            specs, args.log_dir, session=session, on_change=changed,
            settings=SupervisorSettings(health_interval_s=args.health_interval),
        )
        try:
            await supervisor.start()
        except BackendStartError as error:
            print(f"specroute: {error}", file=sys.stderr)
            return 1
        started = True
        try:
            if state is not None:
                _write_state(state, args, supervisor.statuses(), specs, ready=True)
            print(_table(_rows(supervisor.statuses(), specs)), flush=True)
            print("backends up; Ctrl-C stops them", file=sys.stderr, flush=True)
            await stop.wait()
        finally:
            await supervisor.stop()
            if state is not None:
                state.unlink(missing_ok=True)
    return 0


def _rows(statuses: Mapping[str, BackendStatus], specs: Sequence[BackendSpec]) -> dict[str, Any]:
    urls = {spec.name: (spec.base_url, spec.engine) for spec in specs}
    return {name: {**asdict(status), "url": urls[name][0], "engine": urls[name][1]}
            for name, status in statuses.items()}


def _write_state(path: Path, args: argparse.Namespace, statuses: Mapping[str, BackendStatus],
                 specs: Sequence[BackendSpec], *, ready: bool) -> None:
    payload = {"config": str(Path(args.config).resolve()), "supervisor_pid": os.getpid(),
               "log_dir": str(Path(args.log_dir).resolve()), "ready": ready,
               "backends": _rows(statuses, specs)}
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(f".tmp{os.getpid()}")
    temp.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(temp, path)


def _read_state(path: Path) -> dict[str, Any]:
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return payload if isinstance(payload, dict) else {}


# -- status -----------------------------------------------------------------------------------
def _status(args: argparse.Namespace, load_config: LoadBackends) -> int:
    specs = _load(args, load_config)
    if specs is None:
        return 2
    recorded = _read_state(state_path(args.config)).get("backends", {})
    rows = {}
    for spec in specs:
        known = recorded.get(spec.name, {})
        pid = known.get("pid")
        why = _probe_sync(spec.base_url + ADAPTERS[spec.engine].ready_path)
        rows[spec.name] = {"name": spec.name, "profile": spec.profile, "spec": spec.spec_key,
                           "engine": spec.engine,
                           "url": spec.base_url, "launched": spec.launch is not None,
                           "pid": pid if pid and _alive(pid) else None, "healthy": not why,
                           "restarts": known.get("restarts", 0), "last_error": why}
    print(json.dumps(rows, indent=2) if args.json else _table(rows))
    return 0 if all(row["healthy"] for row in rows.values()) else 1


def _probe_sync(url: str, timeout_s: float = 3.0) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return "" if response.status == 200 else f"answered {response.status}"
    except urllib.error.HTTPError as error:
        return f"answered {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return str(getattr(error, "reason", error))


def _table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    columns = ("name", "spec", "engine", "url", "pid", "healthy", "restarts", "last_error")
    lines = [[str(row.get(column, "") if row.get(column) is not None else "-")
              for column in columns] for row in rows.values()]
    widths = [max(len(column), *(len(line[i]) for line in lines)) for i, column in
              enumerate(columns)]
    render = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
              for line in [list(columns), *lines]]
    return "\n".join(render)


# -- down -------------------------------------------------------------------------------------
def _down(args: argparse.Namespace, load_config: LoadBackends) -> int:
    path = state_path(args.config)
    recorded = _read_state(path)
    if not recorded:
        print(f"nothing to stop: no detached backends for {args.config} ({path} absent)")
        return 0
    supervisor = int(recorded.get("supervisor_pid", 0))
    pids = [int(row["pid"]) for row in recorded.get("backends", {}).values() if row.get("pid")]
    if _alive(supervisor):
        os.kill(supervisor, signal.SIGTERM)  # it stops its backends: SIGTERM, then SIGKILL
    deadline = time.monotonic() + args.timeout
    while any(_alive(pid) for pid in [supervisor, *pids]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in [*pids, supervisor]:
        if _alive(pid):
            print(f"pid {pid} still running after {args.timeout:.0f}s: SIGKILL", file=sys.stderr)
            kill = os.killpg if pid in pids else os.kill  # backends lead their own group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(pid, signal.SIGKILL)
    path.unlink(missing_ok=True)
    print(f"stopped {len(pids)} backend(s) and supervisor pid {supervisor}")
    return 0


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie runs nothing any more
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return True
